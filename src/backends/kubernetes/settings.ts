import * as z from 'zod';
import { bool, oneOf, positiveInteger, positiveNumber } from '../../config/zod-kit.js';
import { mergeWritten, type SectionUse, type SettingsSection } from '../../config/section.js';

/*
 * The `kubernetes:` config section: where the cluster is, which namespace, the pod template pieces
 * and the mode. Like the rest of the config, the zod shape describes only what a user may write
 * (every key optional, no defaults); a profile's keys replace the top level's (`mergeWritten`),
 * and `kubernetesUseProblems` states the cross-field rules.
 */

/** How sandboxes are represented in the cluster. */
export const KUBERNETES_MODES = ['pods', 'agent-sandbox'] as const;
export type KubernetesMode = (typeof KUBERNETES_MODES)[number];

/** Network reach of a sandbox pod, enforced by the per-tenant NetworkPolicy. */
export const KUBERNETES_NETWORKS = ['egress', 'none'] as const;
export type KubernetesNetwork = (typeof KUBERNETES_NETWORKS)[number];

/** The validated, immutable `kubernetes` settings of one profile. */
export interface KubernetesSettings {
  /** kubeconfig file; undefined: `$KUBECONFIG` or `~/.kube/config`, as kubectl finds it. Ignored with `inCluster`. */
  kubeconfig: string | undefined;
  /** kubeconfig context; undefined: the file's current context. */
  context: string | undefined;
  /** Use the pod's service account (berth itself runs in the cluster). */
  inCluster: boolean;
  namespace: string;
  /** `pods`: plain Pods (any cluster). `agent-sandbox`: kubernetes-sigs/agent-sandbox `Sandbox` resources. */
  mode: KubernetesMode;
  /** agent-sandbox mode: claim sandboxes from this `SandboxWarmPool` (ephemeral sandboxes only). */
  warmPool: string | undefined;
  image: string;
  imagePullPolicy: 'Always' | 'IfNotPresent' | 'Never' | undefined;
  /**
   * Limits of the sandbox container: memory is a hard cap (the OOM killer), cpu a throttle, and
   * ephemeral-storage (writable layer + emptyDirs) the bound over which the kubelet evicts the pod.
   */
  memoryMb: number;
  cpus: number;
  ephemeralStorageMb: number;
  /**
   * What the scheduler reserves for it (requests, at most the limits): an idle agent shell needs
   * little, so many fit on a node while each may burst to its limits. Set, they also let the pod
   * into a namespace whose ResourceQuota tracks compute resources.
   */
  memoryRequestMb: number;
  cpuRequest: number;
  ephemeralStorageRequestMb: number;
  /** Size of the emptyDir volumes of an ephemeral sandbox (/workspace, home) and of /tmp. */
  tmpSizeMb: number;
  /** Size of a persistent sandbox's PersistentVolumeClaim (/workspace and home). */
  storageMb: number;
  storageClassName: string | undefined;
  runtimeClassName: string | undefined;
  nodeSelector: Readonly<Record<string, string>>;
  serviceAccountName: string | undefined;
  /** The non-root uid/gid sandbox processes run as; `fsGroup` owns the volumes. */
  runAsUser: number;
  runAsGroup: number;
  fsGroup: number;
  network: KubernetesNetwork;
  /** Create the per-tenant NetworkPolicy (false: the operator manages network policy). */
  networkPolicy: boolean;
  /** How long a new pod may take to be Running before the create fails. */
  podStartTimeoutSeconds: number;
  /**
   * How long an image may keep failing to pull (ErrImagePull, ImagePullBackOff) before the create
   * fails naming the image and the registry's error: the kubelet retries after about 10 s, 30 s,
   * 70 s, so a registry's passing failure is waited out. podStartTimeoutSeconds still bounds the whole start.
   */
  imagePullTimeoutSeconds: number;
}

export const KUBERNETES_DEFAULTS: Readonly<KubernetesSettings> = Object.freeze({
  kubeconfig: undefined,
  context: undefined,
  inCluster: false,
  namespace: 'berth',
  mode: 'pods',
  warmPool: undefined,
  image: 'berth-sandbox:latest',
  imagePullPolicy: undefined,
  memoryMb: 2048,
  cpus: 2,
  ephemeralStorageMb: 4096,
  memoryRequestMb: 256,
  cpuRequest: 0.25,
  ephemeralStorageRequestMb: 512,
  tmpSizeMb: 512,
  storageMb: 1024,
  storageClassName: undefined,
  runtimeClassName: undefined,
  nodeSelector: Object.freeze({}),
  serviceAccountName: undefined,
  runAsUser: 1000,
  runAsGroup: 1000,
  fsGroup: 1000,
  network: 'egress',
  networkPolicy: true,
  podStartTimeoutSeconds: 120,
  imagePullTimeoutSeconds: 60,
});

const DNS_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const DNS_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;

const text = (what: string) => z.string({ error: what }).min(1, { error: what }).optional();
const dnsLabel = (what: string) =>
  z.string({ error: what }).max(63, { error: what }).regex(DNS_LABEL, { error: what }).optional();
const dnsSubdomain = (what: string) =>
  z.string({ error: what }).max(253, { error: what }).regex(DNS_SUBDOMAIN, { error: what }).optional();
const nonRootId = () =>
  z.number({ error: 'a uid/gid of at least 1 (0 is root)' }).int({ error: 'a uid/gid of at least 1 (0 is root)' })
    .min(1, { error: 'a uid/gid of at least 1 (0 is root)' }).max(2_147_483_647, { error: 'a uid/gid below 2^31' }).optional();

/** What a user may write under `kubernetes:` (all optional; see `KubernetesSettings` for meanings). */
const kubernetesShape = {
  kubeconfig: text('a path to a kubeconfig file'),
  context: text('a kubeconfig context name'),
  inCluster: bool(),
  namespace: dnsLabel('a namespace name (lowercase letters, digits and "-", at most 63)'),
  mode: oneOf(KUBERNETES_MODES),
  warmPool: dnsSubdomain('a SandboxWarmPool name (a lowercase DNS subdomain)'),
  image: text('a non-empty image reference'),
  imagePullPolicy: oneOf(['Always', 'IfNotPresent', 'Never']),
  memoryMb: positiveInteger(),
  cpus: positiveNumber(),
  ephemeralStorageMb: positiveInteger(),
  memoryRequestMb: positiveInteger(),
  cpuRequest: positiveNumber(),
  ephemeralStorageRequestMb: positiveInteger(),
  tmpSizeMb: positiveInteger(),
  storageMb: positiveInteger(),
  storageClassName: dnsSubdomain('a StorageClass name (a lowercase DNS subdomain)'),
  runtimeClassName: dnsSubdomain('a RuntimeClass name (a lowercase DNS subdomain)'),
  nodeSelector: z.record(z.string(), z.string({ error: 'a label value (a string)' }), { error: 'a mapping of node label keys to values' }).optional(),
  serviceAccountName: dnsSubdomain('a ServiceAccount name (a lowercase DNS subdomain)'),
  runAsUser: nonRootId(),
  runAsGroup: nonRootId(),
  fsGroup: nonRootId(),
  network: oneOf(KUBERNETES_NETWORKS),
  networkPolicy: bool(),
  podStartTimeoutSeconds: positiveInteger(),
  imagePullTimeoutSeconds: positiveInteger(),
};

/**
 * Cross-field rules, as messages that name the key and the fix (`at` is the section's config
 * path, e.g. `kubernetes` or `profiles.bot.kubernetes`). `persistent`: the profile's setting.
 */
export function kubernetesSettingsProblems(s: KubernetesSettings, at: string, persistent: boolean): string[] {
  const problems: string[] = [];
  if (s.inCluster && (s.kubeconfig !== undefined || s.context !== undefined)) {
    problems.push(`config key "${at}.inCluster": true uses the pod's service account, so ${s.kubeconfig !== undefined ? 'kubeconfig' : 'context'} would have no effect; remove one of them`);
  }
  if (s.warmPool !== undefined && s.mode !== 'agent-sandbox') {
    problems.push(`config key "${at}.warmPool": warm pools are agent-sandbox resources and mode is "${s.mode}", so it would have no effect; set ${at}.mode: agent-sandbox or remove warmPool`);
  }
  if (s.warmPool !== undefined && persistent) {
    problems.push(`config key "${at}.warmPool": a warm pool hands out interchangeable sandboxes, which cannot be found again by name as persistent ones must; set persistent: false or remove warmPool`);
  }
  for (const [request, limit] of [['memoryRequestMb', 'memoryMb'], ['cpuRequest', 'cpus'], ['ephemeralStorageRequestMb', 'ephemeralStorageMb']] as const) {
    if (s[request] > s[limit]) problems.push(`config key "${at}.${request}": ${s[request]} is more than the limit ${limit} (${s[limit]}), which Kubernetes refuses; lower ${request} or raise ${limit}`);
  }
  if (s.warmPool !== undefined && s.network === 'none') {
    // NetworkPolicies add up: the pool's SandboxTemplate has a policy of its own (agent-sandbox's
    // default admits public egress), which berth's deny-all policy cannot take away.
    problems.push(
      `config key "${at}.network": "none" cannot be guaranteed for warm-pool pods, because the SandboxTemplate's own NetworkPolicy (agent-sandbox's default admits public egress) adds to berth's; remove warmPool, or use network: egress and deny egress in the template's networkPolicy`,
    );
  }
  if (s.network === 'none' && !s.networkPolicy) {
    problems.push(`config key "${at}.network": "none" is enforced by berth's NetworkPolicy and networkPolicy is false, so it would have no effect; remove one of them`);
  }
  return problems;
}

/** How a place reaches its cluster: the parts of the settings that pick the API server and credentials. */
export function connectionOf(s: KubernetesSettings): string {
  return JSON.stringify(s.inCluster ? ['in-cluster'] : [s.kubeconfig ?? '(default kubeconfig)', s.context ?? '(current context)']);
}

function describeConnection(s: KubernetesSettings): string {
  if (s.inCluster) return 'inCluster: true';
  return `kubeconfig ${s.kubeconfig ?? '(the default)'}, context ${s.context ?? '(its current one)'}`;
}

/**
 * The rules over every place that uses the backend: each place's own (`kubernetesSettingsProblems`),
 * and one cluster connection for all of them, because the reapers must find every sandbox of
 * the installation again from a ref alone (a ref names the namespace and the object, not the cluster).
 */
export function kubernetesUseProblems(uses: readonly SectionUse<KubernetesSettings>[]): string[] {
  const problems = uses.flatMap((u) => kubernetesSettingsProblems(u.settings, u.at, u.persistent));
  const first = uses[0];
  for (const u of uses.slice(1)) {
    if (first === undefined || connectionOf(u.settings) === connectionOf(first.settings)) continue;
    problems.push(
      `config key "${u.at}": every place that uses backend kubernetes must reach the same cluster, and this one (${describeConnection(u.settings)}) differs from "${first.at}" (${describeConnection(first.settings)}); ` +
        'set kubeconfig, context and inCluster once at the top level (namespaces may differ), or run a separate berth installation per cluster',
    );
  }
  return problems;
}

/** The `kubernetes:` section of the config: its keys, defaults, merge and rules. */
export const kubernetesSettings: SettingsSection<KubernetesSettings, typeof kubernetesShape> = {
  shape: kubernetesShape,
  defaults: () => ({ ...KUBERNETES_DEFAULTS }),
  merge: (base, written) => mergeWritten(base, written),
  problems: kubernetesUseProblems,
};
