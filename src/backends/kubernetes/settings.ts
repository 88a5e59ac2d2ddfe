import * as z from 'zod';
import { bool, FULL, integer, oneOf, positiveInteger, positiveNumber } from '../../config/zod-kit.js';
import { labelKeyProblem, labelValueProblem } from './labels.js';
import { blockedCidrProblem, dnsAddressProblem } from './network-ranges.js';
import { mergeWritten, type SectionUse, type SettingsSection } from '../../config/section.js';

/*
 * The `kubernetes:` config section: where the cluster is, which namespace, the pod template pieces
 * and the mode. Like the rest of the config, the zod shape describes only what a user may write
 * (every key optional, no defaults); a profile's keys replace the top level's (`mergeWritten`),
 * and `kubernetesUseProblems` states the cross-field rules.
 */

/** How sandboxes are represented in the cluster. */
const KUBERNETES_MODES = ['pods', 'agent-sandbox'] as const;
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
  /**
   * Where the cluster's resolver pods are, for the policy's DNS rule (`network: egress`): their
   * namespace and pod labels, both required of a peer (CoreDNS keeps kube-dns's `k8s-app` label).
   */
  dnsNamespace: string;
  dnsPodLabels: Readonly<Record<string, string>>;
  /**
   * Addresses besides the resolver pods that sandboxes may send DNS to (port 53 only): NodeLocal
   * DNSCache's link-local address, which no pod selector can pick (its pods use the host network),
   * and, where that cache intercepts it, the kube-dns Service's ClusterIP. [] for none.
   */
  dnsAddresses: readonly string[];
  /**
   * Ranges a sandbox never reaches besides the built-in ones (private, loopback, link-local and
   * their IPv6 and NAT64 forms): the cluster's own pod, service and node ranges when they are
   * public addresses, as on most IPv6 clusters.
   */
  blockedCidrs: readonly string[];
  /**
   * berth's own pods, when berth runs in the cluster (egress `allowlist`): the pods' policy admits
   * them (namespace AND labels, one peer) on `port` instead of the `egressProxy.advertise` address,
   * so that address may be a Service's (a policy sees pod addresses and ports, after a Service's
   * translation). `port` is the one berth's pods listen on (default: advertise's). Undefined: the
   * advertised address, as an ipBlock.
   */
  proxyPods: { namespace: string; labels: Readonly<Record<string, string>>; port: number | undefined } | undefined;
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
  dnsNamespace: 'kube-system',
  dnsPodLabels: Object.freeze({ 'k8s-app': 'kube-dns' }),
  // On by default: NodeLocal DNSCache's conventional address. Without it, DNS fails on every
  // cluster that runs the cache (GKE turns it on for Autopilot), and what it opens is port 53 of
  // one link-local address reserved for that cache; metadata (169.254.169.254) stays blocked.
  dnsAddresses: Object.freeze(['169.254.20.10']),
  blockedCidrs: Object.freeze([]),
  proxyPods: undefined,
  podStartTimeoutSeconds: 120,
  imagePullTimeoutSeconds: 60,
});

const DNS_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const DNS_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;

const text = (what: string) => z.string({ error: what }).min(1, { error: what }).optional();
const requiredDnsLabel = (what: string) => z.string({ error: what }).max(63, { error: what }).regex(DNS_LABEL, { error: what });
const dnsLabel = (what: string) => requiredDnsLabel(what).optional();
const NAMESPACE_NAME = 'a namespace name (lowercase letters, digits and "-", at most 63)';
const dnsSubdomain = (what: string) =>
  z.string({ error: what }).max(253, { error: what }).regex(DNS_SUBDOMAIN, { error: what }).optional();
/** Pod labels of a policy peer: valid keys and values, and at least one (an empty selector picks every pod of the namespace). */
const podLabels = (traffic: string) =>
  z.record(z.string(), z.string({ error: 'a label value (a string)' }).superRefine(problemOf(labelValueProblem)), { error: 'a mapping of pod label keys to values' })
    .superRefine((m, ctx) => {
      if (Object.keys(m).length === 0) ctx.addIssue({ code: 'custom', message: `needs at least one label: an empty selector would admit ${traffic} to every pod of the namespace`, params: FULL });
      for (const key of Object.keys(m)) {
        const message = labelKeyProblem(key);
        if (message !== undefined) ctx.addIssue({ code: 'custom', path: [key], message, params: FULL });
      }
    });
const nonRootId = () =>
  z.number({ error: 'a uid/gid of at least 1 (0 is root)' }).int({ error: 'a uid/gid of at least 1 (0 is root)' })
    .min(1, { error: 'a uid/gid of at least 1 (0 is root)' }).max(2_147_483_647, { error: 'a uid/gid below 2^31' }).optional();

/** A zod check from a function that says what is wrong with a value, or undefined. */
function problemOf(problem: (value: string) => string | undefined) {
  return (value: string, ctx: z.core.$RefinementCtx<string>): void => {
    const message = problem(value);
    if (message !== undefined) ctx.addIssue({ code: 'custom', message, params: FULL });
  };
}

/** What a user may write under `kubernetes:` (all optional; see `KubernetesSettings` for meanings). */
const kubernetesShape = {
  kubeconfig: text('a path to a kubeconfig file'),
  context: text('a kubeconfig context name'),
  inCluster: bool(),
  namespace: dnsLabel(NAMESPACE_NAME),
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
  dnsNamespace: dnsLabel(NAMESPACE_NAME),
  dnsPodLabels: podLabels('DNS traffic').optional(),
  dnsAddresses: z.array(z.string({ error: 'an IP address (a string)' }).superRefine(problemOf(dnsAddressProblem)), { error: 'a list of IP addresses' }).optional(),
  blockedCidrs: z.array(z.string({ error: 'a CIDR range (a string)' }).superRefine(problemOf(blockedCidrProblem)), { error: 'a list of CIDR ranges' }).optional(),
  proxyPods: z.strictObject({
    namespace: requiredDnsLabel(NAMESPACE_NAME),
    labels: podLabels("the sandboxes' traffic"),
    port: integer(1, 65_535),
  }, { error: "berth's pods as { namespace, labels, port }" }).optional(),
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

/**
 * What a place's `egress:` asks of its pods that berth's NetworkPolicy cannot give: `allowlist` and
 * `none` are enforced by that policy alone (none without it, none with a warm pool's template
 * policy added); the proxy serves plain pods (mode pods) in allowlist mode.
 */
function egressUseProblems(s: KubernetesSettings, at: string, egress: SectionUse<KubernetesSettings>['egress']): string[] {
  const problems: string[] = [];
  if (egress.mode !== 'open' && !s.networkPolicy) {
    problems.push(`config key "${at}.networkPolicy": false, and egress mode ${egress.mode} is enforced by berth's NetworkPolicy; remove networkPolicy: false, or use egress mode open`);
  }
  if (egress.mode !== 'open' && s.warmPool !== undefined) {
    problems.push(`config key "${at}.warmPool": a warm pool's SandboxTemplate has a NetworkPolicy of its own, which adds to berth's, so egress mode ${egress.mode} cannot be guaranteed; remove warmPool, or use egress mode open`);
  }
  if (egress.proxied && s.mode !== 'pods') {
    problems.push(`config key "${at}.mode": berth's egress proxy (egress mode allowlist, or credentials) serves kubernetes sandboxes in mode pods only; set ${at}.mode: pods, or remove the allowlist and credentials`);
  }
  if (egress.proxied && egress.mode === 'open') {
    problems.push(`config key "${at}": credentials on kubernetes need egress mode allowlist (the pod's NetworkPolicy then admits berth's proxy and nothing else); set egress.mode: allowlist with the hosts the sandbox needs`);
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
function kubernetesUseProblems(uses: readonly SectionUse<KubernetesSettings>[]): string[] {
  const problems = uses.flatMap((u) => [...kubernetesSettingsProblems(u.settings, u.at, u.persistent), ...egressUseProblems(u.settings, u.at, u.egress)]);
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
  // The cluster's resolver and address ranges: one cluster per installation, and every profile's
  // sandboxes of a tenant share its policy.
  installationWide: ['dnsNamespace', 'dnsPodLabels', 'dnsAddresses', 'blockedCidrs', 'proxyPods'],
};
