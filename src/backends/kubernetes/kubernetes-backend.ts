import { randomBytes } from 'node:crypto';
import type { KubeConfig } from '@kubernetes/client-node';
import { BackendUnavailableError, BerthError, ConfigError } from '../../errors.js';
import { Logger } from '../../logging/logger.js';
import type { Backend, ManagedSandbox, Sandbox, SandboxEgress, SandboxSpec } from '../backend.js';
import { ProcessSandbox } from '../plumbing/process-sandbox.js';
import { checkAccess } from './access-check.js';
import { ApiTransport } from './api-transport.js';
import { checkPodAdmitted } from './admission-check.js';
import { checkAgentSandboxCrds } from './crd-check.js';
import { deleteSandbox, ensureAgentSandbox, ensureEphemeralSandbox, listSandboxes } from './agent-sandboxes.js';
import type { ExecTarget } from './spawn.js';
import { kubeClient, kubeConfigFor, type KubeClient } from './kube-client.js';
import { IDENTITY_ANNOTATION, installationSelector, LABEL } from './labels.js';
import { dataClaimName } from './names.js';
import { checkNetworkPolicies } from './network-policies.js';
import { ensurePodSandbox, listManagedPods } from './pod-sandboxes.js';
import { PodSandboxHandle } from './sandbox-handle.js';
import { deleteClaim, deletePod, waitForPodGone } from './pods.js';
import type { PodProxyEgress } from './proxy-egress.js';
import { formatRef, parseRef, type SandboxRef } from './refs.js';
import { claimedSandbox, deleteClaimResource, ensureClaimedSandbox, listClaims } from './sandbox-claims.js';
import { connectionOf, type KubernetesSettings } from './settings.js';

/** What an allowlist pod needs of berth's proxy; undefined when the proxy does not serve it (config rules make both or neither present). */
function podProxyEgress(spec: SandboxSpec<KubernetesSettings>): PodProxyEgress | undefined {
  const e = spec.egress;
  if (e?.mode !== 'allowlist') return undefined;
  if (e.sharedProxy === undefined || e.ca === undefined) throw new ConfigError('kubernetes: egress mode allowlist needs berth\'s shared proxy listener; set egressProxy.listen and egressProxy.advertise');
  return { proxy: e.sharedProxy, ca: e.ca };
}

/** How long `remove` waits for a pod to be gone (its processes ended) before it reports success. */
const REMOVE_WAIT_MS = 60_000;

export interface KubernetesBackendOptions {
  installation: string;
  log?: Logger;
  /** The `kubernetes` sections of every place of the config that uses this backend. */
  sections?: readonly KubernetesSettings[];
  /** Tests: the KubeConfig to use instead of loading the settings' kubeconfig. */
  kubeConfig?: KubeConfig;
}

/**
 * Sandboxes as pods on a Kubernetes cluster (docs/design.md §6): plain Pods, or agent-sandbox
 * `Sandbox` resources and `SandboxClaim`s on a warm pool. Every process starts over a pods/exec
 * WebSocket; the shell, helpers and tar are the shared plumbing on that one `spawn`. The cluster
 * schedules; the API server holds the state (labels and annotations) that reapers list.
 *
 * @example
 * const backend = new KubernetesBackend({ installation: 'inst-1', sections: [settings.kubernetes] });
 * await backend.check(settings.kubernetes);       // reachable, and berth may do what it needs
 * const sandbox = await backend.ensure(spec, undefined);
 */
export class KubernetesBackend implements Backend<KubernetesSettings> {
  readonly name = 'kubernetes' as const;

  private readonly installation: string;
  private readonly logger: Logger;
  private readonly log: (msg: string) => void;
  private readonly injected: KubeConfig | undefined;
  /** The installation's one cluster: its connection key and KubeConfig, once known. */
  private cluster: { key: string; kc: KubeConfig; transport: ApiTransport } | undefined;
  private readonly clients = new Map<string, KubeClient>();
  /** Namespaces and modes in use, for `listManaged`. */
  private readonly namespaces = new Map<string, { agentSandbox: boolean; claims: boolean }>();
  /** Persistent pods this process stopped: started again, they are not reported as recreated. */
  private readonly stopped = new Set<string>();
  private closed = false;

  constructor(opts: KubernetesBackendOptions) {
    this.installation = opts.installation;
    this.logger = opts.log ?? Logger.silent();
    this.log = (msg) => this.logger.debug(msg);
    this.injected = opts.kubeConfig;
    for (const s of opts.sections ?? []) this.learn(s);
  }

  async check(k: KubernetesSettings, egress?: SandboxEgress): Promise<void> {
    const client = this.clientFor(k);
    await checkAccess(client, k, egress?.mode === 'allowlist');
    // A warm pool's pods are its template's, not berth's: their admission is the template's operator's to check.
    if (k.warmPool === undefined) await checkPodAdmitted(client, k, this.installation, this.logger);
    await checkAgentSandboxCrds(client, k);
    if (k.networkPolicy) await checkNetworkPolicies(client, this.installation, k, egress?.sharedProxy);
  }

  async ensure(spec: SandboxSpec<KubernetesSettings>, knownRef: string | undefined): Promise<Sandbox> {
    if (this.closed) throw new BerthError('internal', 'the kubernetes backend is closed');
    if (spec.identity.installation !== this.installation) {
      throw new BerthError('internal', `sandbox of installation ${spec.identity.installation} asked of the backend of installation ${this.installation}`);
    }
    // Egress mode none is the no-egress NetworkPolicy, whatever `network` says; allowlist, the proxy's.
    const k: KubernetesSettings = spec.egress?.mode === 'none' ? { ...spec.section, network: 'none' } : spec.section;
    const client = this.clientFor(k);
    const egress = podProxyEgress(spec);
    const known = knownRef === undefined ? undefined : parseRef(knownRef);
    const input = { identity: spec.identity, digest: spec.digest, rule: spec.rule, mount: spec.mount, kubernetes: k };
    const unique = (): string => randomBytes(6).toString('hex');
    // A record of another kind or namespace (the config changed) is not this sandbox's object.
    const knownName = (kind: SandboxRef['kind']): string | undefined => (known?.kind === kind && known.namespace === k.namespace ? known.name : undefined);
    const handle = (kind: SandboxRef['kind'], name: string, target: ExecTarget, recreated: boolean): Sandbox =>
      this.handleOf(spec, formatRef({ kind, namespace: k.namespace, name }), target, recreated);

    if (k.mode === 'pods') {
      const pod = await ensurePodSandbox(client, { ...input, ephemeral: spec.ephemeral, knownName: knownName('pod'), unique, egress, log: this.logger });
      const ref = formatRef({ kind: 'pod', namespace: k.namespace, name: pod.name });
      const recreated = pod.recreated && !this.stopped.has(ref);
      this.stopped.delete(ref);
      if (recreated) this.logger.with({ key: spec.identity.key, ref }).debug('the sandbox pod was gone (deleted out of band or ended); a new one was made');
      return handle('pod', pod.name, pod.target, recreated);
    }
    if (egress !== undefined) throw new ConfigError(`kubernetes: berth's egress proxy serves sandboxes in mode pods only, and this profile's mode is ${k.mode}; set kubernetes.mode: pods`);
    if (!spec.ephemeral) {
      const made = await ensureAgentSandbox(client, input);
      const recreated = knownName('sandbox') !== undefined && (made.created || made.replaced);
      if (recreated) {
        this.logger.with({ key: spec.identity.key, ref: made.name })
          .debug(made.created ? 'the Sandbox was gone (deleted out of band); a new one was made' : 'its pod had ended or was gone; the controller made a new one, the files kept on its claim');
      }
      return handle('sandbox', made.name, made.target, recreated);
    }
    if (k.warmPool !== undefined) {
      const claimed = await ensureClaimedSandbox(client, { ...input, knownName: knownName('claim'), unique });
      return handle('claim', claimed.claim, claimed.target, claimed.recreated);
    }
    const made = await ensureEphemeralSandbox(client, { ...input, knownName: knownName('sandbox'), unique });
    return handle('sandbox', made.name, made.target, made.recreated);
  }

  async remove(ref: string): Promise<void> {
    const r = parseRef(ref);
    const client = this.clientIn(r.namespace);
    switch (r.kind) {
      case 'pod':
        await deletePod(client, r.name);
        // The claim's protection keeps it until its pod is gone; and a removed sandbox's processes must be over.
        await waitForPodGone(client, r.name, REMOVE_WAIT_MS);
        await deleteClaim(client, dataClaimName(r.name));
        break;
      case 'sandbox':
        await deleteSandbox(client, r.name);
        await waitForPodGone(client, r.name, REMOVE_WAIT_MS);
        break;
      case 'claim': {
        const sandbox = await claimedSandbox(client, r.name);
        await deleteClaimResource(client, r.name);
        if (sandbox !== undefined) await waitForPodGone(client, sandbox, REMOVE_WAIT_MS);
        break;
      }
    }
    this.stopped.delete(ref);
    this.logger.with({ ref }).debug('removed');
  }

  /**
   * Mode pods: the pod is deleted, a persistent sandbox's claim (its files) stays, and the next
   * `ensure` makes a new pod on it. An agent-sandbox pod belongs to its controller, which would
   * only make it again: berth leaves it running (suspending needs patch rights berth does not ask for).
   */
  async stop(ref: string): Promise<void> {
    const r = parseRef(ref);
    if (r.kind !== 'pod') {
      this.log(`stop ${ref}: left running (an agent-sandbox pod is its controller's)`);
      return;
    }
    const client = this.clientIn(r.namespace);
    await deletePod(client, r.name);
    await waitForPodGone(client, r.name, REMOVE_WAIT_MS);
    this.stopped.add(ref);
  }

  async listManaged(): Promise<ManagedSandbox[]> {
    if (this.namespaces.size === 0) {
      throw new BackendUnavailableError('kubernetes: no place of the config uses backend kubernetes, so berth does not know which cluster to list; set backend: kubernetes where it is used');
    }
    const out: ManagedSandbox[] = [];
    const selector = installationSelector(this.installation);
    for (const [namespace, uses] of this.namespaces) {
      const client = this.clientIn(namespace);
      for (const p of await listManagedPods(client, this.installation)) {
        // A pod a controller owns (a Sandbox's) is listed through its Sandbox or claim, never as a bare pod.
        if (p.controlled) continue;
        out.push({ ref: formatRef({ kind: 'pod', namespace, name: p.name }), name: p.name, digest: p.digest, ephemeral: p.ephemeral, running: p.running });
      }
      if (uses.agentSandbox) {
        for (const s of await listSandboxes(client, selector)) {
          const meta = s.metadata;
          if (meta.annotations?.[LABEL.installation] !== this.installation || meta.name === undefined) continue;
          const ready = ((s as { status?: { conditions?: { type: string; status: string }[] } }).status?.conditions ?? []).some((c) => c.type === 'Ready' && c.status === 'True');
          out.push({
            ref: formatRef({ kind: 'sandbox', namespace, name: meta.name }), name: meta.name, digest: meta.annotations[IDENTITY_ANNOTATION] ?? '',
            ephemeral: meta.labels?.[LABEL.lifecycle] === 'ephemeral', running: ready && meta.deletionTimestamp === undefined,
          });
        }
      }
      if (uses.claims) {
        for (const c of await listClaims(client, selector)) {
          out.push({ ref: formatRef({ kind: 'claim', namespace, name: c.name }), name: c.name, digest: c.digest, ephemeral: true, running: c.bound && !c.deleting });
        }
      }
    }
    return out;
  }

  async close(): Promise<void> {
    this.closed = true;
    this.clients.clear();
    this.cluster?.transport.close();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  private handleOf(spec: SandboxSpec<KubernetesSettings>, ref: string, target: ExecTarget, recreated: boolean): Sandbox {
    return new ProcessSandbox(new PodSandboxHandle({ spec, ref, target, recreated, log: (msg) => this.logger.with({ ref }).debug(msg) }));
  }

  /** Records a place's namespace and mode, and fixes the installation's one cluster connection. */
  private learn(k: KubernetesSettings): void {
    const key = connectionOf(k);
    if (this.cluster === undefined) {
      const kc = this.injected ?? kubeConfigFor(k);
      this.cluster = { key, kc, transport: new ApiTransport(kc, { log: (msg) => this.logger.debug(`kubernetes API: ${msg}`) }) };
    } else if (this.cluster.key !== key) {
      throw new ConfigError('kubernetes: every profile that uses backend kubernetes must reach the same cluster (kubeconfig, context, inCluster); set them once at the top level');
    }
    const uses = this.namespaces.get(k.namespace) ?? { agentSandbox: false, claims: false };
    this.namespaces.set(k.namespace, { agentSandbox: uses.agentSandbox || k.mode === 'agent-sandbox', claims: uses.claims || k.warmPool !== undefined });
  }

  private clientFor(k: KubernetesSettings): KubeClient {
    this.learn(k);
    return this.clientIn(k.namespace);
  }

  private clientIn(namespace: string): KubeClient {
    if (this.cluster === undefined) {
      throw new BackendUnavailableError('kubernetes: no place of the config uses backend kubernetes, so berth does not know which cluster holds this sandbox; set backend: kubernetes where it is used');
    }
    let c = this.clients.get(namespace);
    if (c === undefined) {
      c = kubeClient(this.cluster.kc, namespace, this.cluster.transport);
      this.clients.set(namespace, c);
    }
    return c;
  }
}
