import type {
  V1Container,
  V1NetworkPolicy,
  V1NetworkPolicyEgressRule,
  V1PersistentVolumeClaim,
  V1Pod,
  V1PodSpec,
  V1ResourceRequirements,
  V1Volume,
  V1VolumeMount,
} from '@kubernetes/client-node';
import { formatCidr } from '../../egress/addresses.js';
import { UnsupportedError } from '../../errors.js';
import type { SandboxIdentity } from '../../scope/naming.js';
import { LABEL, labelValue, NETWORK_LABEL, sandboxAnnotations, sandboxLabels, tenantMatchLabels } from './labels.js';
import { dataClaimName, tenantPolicyName } from './names.js';
import { BLOCKED_V4, BLOCKED_V6, canonicalCidr } from './network-ranges.js';
import type { KubernetesSettings } from './settings.js';

/*
 * The manifests berth sends for a sandbox: pure functions of the identity and the profile's
 * kubernetes settings. Every one of them is validated in tests against the vendored schemas
 * (test/schemas/).
 *
 * Isolation (docs/design.md §8, Pod Security "restricted"): a non-root uid, no privilege escalation,
 * every capability dropped, the runtime's default seccomp profile, a read-only root file system
 * with writable volumes only where a sandbox writes, no service-account token, no service
 * environment variables, and a per-tenant NetworkPolicy that admits no ingress.
 */

export const WORKSPACE = '/workspace';
export const HOME = '/home/berth';
/** berth's own files (shell snapshots): under home, never the workspace. */
export const STATE_DIR = `${HOME}/.berth`;
export const TMP = '/tmp';
export const CONTAINER_NAME = 'sandbox';
/** Name of the volume (and, in agent-sandbox mode, of the claim template) holding a persistent sandbox's files. */
export const DATA_VOLUME = 'data';

export interface SandboxManifestInput {
  identity: SandboxIdentity;
  /** Hex sha256 of the identity. */
  digest: string;
  ephemeral: boolean;
  /** The scope mode / auto row that produced the key, for labels. */
  rule: string;
  /** The pod's (or Sandbox's) name, from names.ts. */
  name: string;
  /** Host dir the caller wants at /workspace: never possible on a cluster, so it must be null. */
  mount: string | null;
  kubernetes: KubernetesSettings;
}

/** Where a persistent sandbox's data volume comes from: a PVC berth made, or the Sandbox's claim template. */
export type DataSource = 'claim' | 'claim-template';

function mib(n: number): string {
  return `${n}Mi`;
}

/** CPU as Kubernetes writes it: whole cores, or millicores (`250m`) for a fraction. */
function cpuQuantity(cores: number): string {
  return Number.isInteger(cores) ? String(cores) : `${Math.round(cores * 1000)}m`;
}

/** Requests and limits of the sandbox container (settings.ts says what each bounds). */
export function resourcesOf(k: KubernetesSettings): V1ResourceRequirements {
  return {
    requests: { cpu: cpuQuantity(k.cpuRequest), memory: mib(k.memoryRequestMb), 'ephemeral-storage': mib(k.ephemeralStorageRequestMb) },
    limits: { cpu: cpuQuantity(k.cpus), memory: mib(k.memoryMb), 'ephemeral-storage': mib(k.ephemeralStorageMb) },
  };
}

function volumesOf(input: SandboxManifestInput, data: DataSource): { volumes: V1Volume[]; mounts: V1VolumeMount[] } {
  const size = mib(input.kubernetes.tmpSizeMb);
  const volumes: V1Volume[] = [{ name: 'tmp', emptyDir: { sizeLimit: size } }];
  const mounts: V1VolumeMount[] = [{ name: 'tmp', mountPath: TMP }];
  if (input.ephemeral) {
    volumes.push({ name: 'workspace', emptyDir: { sizeLimit: size } }, { name: 'home', emptyDir: { sizeLimit: size } });
    mounts.push({ name: 'workspace', mountPath: WORKSPACE }, { name: 'home', mountPath: HOME });
    return { volumes, mounts };
  }
  // agent-sandbox injects the volume for a claim template itself (named after the template).
  if (data === 'claim') volumes.push({ name: DATA_VOLUME, persistentVolumeClaim: { claimName: dataClaimName(input.name) } });
  mounts.push({ name: DATA_VOLUME, mountPath: WORKSPACE, subPath: 'workspace' }, { name: DATA_VOLUME, mountPath: HOME, subPath: 'home' });
  return { volumes, mounts };
}

/** The sandbox container: it only waits; every command is exec'd into it. */
function containerOf(input: SandboxManifestInput, mounts: V1VolumeMount[]): V1Container {
  const k = input.kubernetes;
  const container: V1Container = {
    name: CONTAINER_NAME,
    image: k.image,
    command: ['sleep', 'infinity'],
    workingDir: WORKSPACE,
    env: [{ name: 'HOME', value: HOME }],
    securityContext: {
      runAsNonRoot: true,
      runAsUser: k.runAsUser,
      runAsGroup: k.runAsGroup,
      allowPrivilegeEscalation: false,
      privileged: false,
      readOnlyRootFilesystem: true,
      capabilities: { drop: ['ALL'] },
      seccompProfile: { type: 'RuntimeDefault' },
    },
    volumeMounts: mounts,
    stdin: false,
    tty: false,
  };
  if (k.imagePullPolicy !== undefined) container.imagePullPolicy = k.imagePullPolicy;
  container.resources = resourcesOf(k);
  return container;
}

/** Pods run on cluster nodes, so a dir on berth's host can never be mounted: refuse, never drop it silently. */
export function assertNoHostMount(mount: string | null): void {
  if (mount === null) return;
  throw new UnsupportedError(
    `the kubernetes backend cannot mount host dir ${JSON.stringify(mount)} at ${WORKSPACE}: pods run on cluster nodes, not on berth's host; ` +
      'upload files instead (berth cp), or use backend: docker for host mounts',
  );
}

/** The pod spec of a sandbox (a Pod's, or a Sandbox's pod template's). */
export function sandboxPodSpec(input: SandboxManifestInput, data: DataSource = 'claim'): V1PodSpec {
  assertNoHostMount(input.mount);
  const k = input.kubernetes;
  const { volumes, mounts } = volumesOf(input, data);
  const spec: V1PodSpec = {
    containers: [containerOf(input, mounts)],
    volumes,
    restartPolicy: 'Never',
    automountServiceAccountToken: false,
    enableServiceLinks: false,
    // The pause container becomes PID 1 and reaps orphans (killed commands' double forks) as
    // docker's init does; the sandbox's own processes see no other container.
    shareProcessNamespace: true,
    terminationGracePeriodSeconds: 2,
    securityContext: {
      runAsNonRoot: true,
      runAsUser: k.runAsUser,
      runAsGroup: k.runAsGroup,
      fsGroup: k.fsGroup,
      seccompProfile: { type: 'RuntimeDefault' },
    },
  };
  if (k.runtimeClassName !== undefined) spec.runtimeClassName = k.runtimeClassName;
  if (Object.keys(k.nodeSelector).length > 0) spec.nodeSelector = { ...k.nodeSelector };
  if (k.serviceAccountName !== undefined) spec.serviceAccountName = k.serviceAccountName;
  return spec;
}

/** Labels of a sandbox's pod: the identity's, and the network reach its NetworkPolicy selects on. */
export function sandboxPodLabels(input: SandboxManifestInput): Record<string, string> {
  return { ...sandboxLabels(input), [NETWORK_LABEL]: input.kubernetes.network };
}

/** The Pod of a sandbox (mode `pods`). */
export function sandboxPod(input: SandboxManifestInput): V1Pod {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: {
      name: input.name,
      namespace: input.kubernetes.namespace,
      labels: sandboxPodLabels(input),
      annotations: sandboxAnnotations(input),
    },
    spec: sandboxPodSpec(input, 'claim'),
  };
}

/** The PersistentVolumeClaim of a persistent sandbox (mode `pods`); it outlives the pod. */
export function sandboxDataClaim(input: SandboxManifestInput): V1PersistentVolumeClaim {
  if (input.ephemeral) throw new RangeError('an ephemeral sandbox has no data claim: its files live in emptyDir volumes');
  const k = input.kubernetes;
  const claim: V1PersistentVolumeClaim = {
    apiVersion: 'v1',
    kind: 'PersistentVolumeClaim',
    metadata: {
      name: dataClaimName(input.name),
      namespace: k.namespace,
      labels: sandboxLabels(input),
      annotations: sandboxAnnotations(input),
    },
    spec: {
      accessModes: ['ReadWriteOnce'],
      resources: { requests: { storage: mib(k.storageMb) } },
    },
  };
  if (k.storageClassName !== undefined && claim.spec !== undefined) claim.spec.storageClassName = k.storageClassName;
  return claim;
}

/** Well-known label every namespace carries with its own name (Kubernetes 1.21 and later). */
export const NAMESPACE_NAME_LABEL = 'kubernetes.io/metadata.name';

/** A range as an ipBlock `except` or `cidr` writes it (the canonical form the API server keeps). */
function cidrsOf(texts: readonly string[], family: 4 | 6): string[] {
  return texts.map(canonicalCidr).filter((r) => r.family === family).map(formatCidr);
}

function egressRules(k: KubernetesSettings): V1NetworkPolicyEgressRule[] {
  if (k.network === 'none') return [];
  const dnsAddresses = [...cidrsOf(k.dnsAddresses, 4), ...cidrsOf(k.dnsAddresses, 6)];
  return [
    {
      // Name resolution: the cluster's resolver pods (namespace AND labels, one peer), and the
      // addresses of a node-local cache, all in blocked ranges, on port 53 only.
      to: [
        { namespaceSelector: { matchLabels: { [NAMESPACE_NAME_LABEL]: k.dnsNamespace } }, podSelector: { matchLabels: { ...k.dnsPodLabels } } },
        ...dnsAddresses.map((cidr) => ({ ipBlock: { cidr } })),
      ],
      ports: [{ protocol: 'UDP', port: 53 }, { protocol: 'TCP', port: 53 }],
    },
    {
      to: [
        { ipBlock: { cidr: '0.0.0.0/0', except: [...BLOCKED_V4, ...cidrsOf(k.blockedCidrs, 4)] } },
        { ipBlock: { cidr: '::/0', except: [...BLOCKED_V6, ...cidrsOf(k.blockedCidrs, 6)] } },
      ],
    },
  ];
}

/**
 * The NetworkPolicy of one tenant's sandboxes of one installation made with `k.network`: no
 * ingress at all (so no sandbox reaches another, of this tenant or any other), and egress per
 * `network`: nothing, or DNS plus addresses outside the blocked ranges (network-ranges.ts). Create it before the
 * tenant's first pod, so no pod is ever unguarded.
 */
export function tenantNetworkPolicy(installation: string, tenant: string, k: KubernetesSettings): V1NetworkPolicy {
  return {
    apiVersion: 'networking.k8s.io/v1',
    kind: 'NetworkPolicy',
    metadata: {
      name: tenantPolicyName(installation, tenant, k.network),
      namespace: k.namespace,
      labels: { [LABEL.managed]: 'true', [LABEL.installation]: labelValue(installation), [LABEL.tenant]: labelValue(tenant), [NETWORK_LABEL]: k.network },
      annotations: { [LABEL.installation]: installation, [LABEL.tenant]: tenant },
    },
    spec: {
      podSelector: { matchLabels: tenantMatchLabels(installation, tenant, k.network) },
      policyTypes: ['Ingress', 'Egress'],
      ingress: [],
      egress: egressRules(k),
    },
  };
}
