import { randomBytes, randomUUID } from 'node:crypto';
import { additionalPodMetadataProblem } from './claim-metadata.js';
import { reconcileSandbox, type ControllerHost } from './sandbox-controller.js';

/*
 * A sketch of agent-sandbox's warm pool and claim controllers (v0.5, extensions), for the calls
 * berth makes: a `SandboxWarmPool` keeps `replicas` unclaimed Sandboxes made from its
 * `SandboxTemplate`'s pod template (each then gets its pod from the Sandbox controller sketch);
 * a `SandboxClaim` on the pool is bound to one of them a moment after its creation, unless the
 * controller refuses its `additionalPodMetadata` (claim-metadata.ts) or its pool is missing, each
 * reported in the claim's Ready condition: the Sandbox is owned by the claim from then on
 * (deleted with it), the claim's `status.sandbox.name` names it, its pod gets the claim's
 * `additionalPodMetadata` a moment later still, and the pool is filled again. Not emulated: making a Sandbox
 * for a claim when the pool is empty (the claim stays unbound), update strategies, the
 * template's network policy and services, env injection, shutdown times.
 */

type Obj = Record<string, unknown> & { metadata: Record<string, unknown> };

/** Label on the pool's unclaimed Sandboxes naming their pool. */
export const POOL_LABEL = 'agents.x-k8s.io/warm-pool';

function ownerRef(kind: string, apiVersion: string, obj: Obj): object {
  return { apiVersion, kind, name: obj.metadata['name'], uid: obj.metadata['uid'], controller: true, blockOwnerDeletion: true };
}

function unclaimed(host: ControllerHost, namespace: string, pool: string): [string, Obj][] {
  return [...host.store('sandboxes')].filter(([key, s]) => key.startsWith(`${namespace}/`) && (s.metadata['labels'] as Record<string, string> | undefined)?.[POOL_LABEL] === pool);
}

/** Makes Sandboxes until the pool has `replicas` unclaimed ones (none while its template is missing). */
export function fillPool(host: ControllerHost, namespace: string, pool: Obj): void {
  const name = String(pool.metadata['name']);
  const spec = pool['spec'] as { replicas?: number; sandboxTemplateRef: { name: string } };
  const template = host.store('sandboxtemplates').get(`${namespace}/${spec.sandboxTemplateRef.name}`);
  if (template === undefined) return;
  const podTemplate = (template['spec'] as { podTemplate: object }).podTemplate;
  for (let n = unclaimed(host, namespace, name).length; n < (spec.replicas ?? 1); n++) {
    const sandboxName = `${name}-${randomBytes(3).toString('hex')}`;
    const sandbox: Obj = {
      apiVersion: 'agents.x-k8s.io/v1beta1', kind: 'Sandbox',
      metadata: {
        name: sandboxName, namespace, uid: randomUUID(), creationTimestamp: new Date().toISOString(),
        labels: { [POOL_LABEL]: name }, ownerReferences: [ownerRef('SandboxWarmPool', 'extensions.agents.x-k8s.io/v1beta1', pool)],
      },
      spec: { podTemplate: structuredClone(podTemplate) },
    };
    host.put('sandboxes', `${namespace}/${sandboxName}`, sandbox);
    reconcileSandbox(host, namespace, sandbox);
  }
}

/** How the claim controller sketch behaves: the real one binds and copies metadata asynchronously. */
export interface ClaimControllerOptions {
  /** The controller's label domain allowlist (its allowed-label-domains file). */
  allowedLabelDomains: readonly string[];
  /** From a claim's creation to its binding (the controller's reconcile). */
  bindDelayMs: number;
  /** From the binding to the claim's labels and annotations on the pod (the Sandbox controller's next reconcile). */
  podMetadataDelayMs: number;
}

function setReady(claim: Obj, ready: boolean, reason: string, message: string): void {
  const status = (claim['status'] ?? {}) as Record<string, unknown>;
  claim['status'] = { ...status, conditions: [{ type: 'Ready', status: ready ? 'True' : 'False', reason, message, lastTransitionTime: new Date().toISOString(), observedGeneration: 1 }] };
}

/** A claim just created: the controller looks at it a little later, as the real one does. */
export function reconcileClaim(host: ControllerHost, namespace: string, claim: Obj, opts: ClaimControllerOptions): void {
  host.later(opts.bindDelayMs, () => bindClaim(host, namespace, claim, opts));
}

/**
 * Binds a claim to one of its pool's unclaimed Sandboxes (and fills the pool again), unless its
 * metadata is refused or its pool is missing (the Ready condition says why); none free: it stays
 * unbound. The pod gets the claim's metadata only later.
 */
function bindClaim(host: ControllerHost, namespace: string, claim: Obj, opts: ClaimControllerOptions): void {
  const key = `${namespace}/${String(claim.metadata['name'])}`;
  if (host.store('sandboxclaims').get(key) !== claim) return;
  const spec = claim['spec'] as { warmPoolRef: { name: string }; additionalPodMetadata?: { labels?: Record<string, string>; annotations?: Record<string, string> } };
  const problem = additionalPodMetadataProblem(spec.additionalPodMetadata, opts.allowedLabelDomains);
  const refuse = (reason: string, message: string): void => {
    setReady(claim, false, reason, message);
    host.touch('sandboxclaims', key);
  };
  if (problem !== undefined) return refuse('InvalidMetadata', problem);
  const poolName = spec.warmPoolRef.name;
  const pool = host.store('sandboxwarmpools').get(`${namespace}/${poolName}`);
  if (pool === undefined) return refuse('WarmPoolNotFound', `SandboxWarmPool ${JSON.stringify(poolName)} not found`);
  const free = unclaimed(host, namespace, poolName)[0];
  if (free === undefined) return refuse('SandboxMissing', 'Sandbox does not exist');
  const [sandboxKey, sandbox] = free;
  const labels = { ...(sandbox.metadata['labels'] as Record<string, string>) };
  delete labels[POOL_LABEL];
  sandbox.metadata['labels'] = labels;
  sandbox.metadata['ownerReferences'] = [ownerRef('SandboxClaim', 'extensions.agents.x-k8s.io/v1beta1', claim)];
  const sandboxName = String(sandbox.metadata['name']);
  host.touch('sandboxes', sandboxKey);
  claim['status'] = { sandbox: { name: sandboxName } };
  setReady(claim, false, 'SandboxNotReady', 'Sandbox is not ready');
  claimStatus(host, namespace, claim);
  host.touch('sandboxclaims', key);
  host.later(opts.podMetadataDelayMs, () => {
    const pod = host.store('pods').get(`${namespace}/${sandboxName}`);
    if (pod === undefined) return;
    pod.metadata['labels'] = { ...(pod.metadata['labels'] as Record<string, string>), ...spec.additionalPodMetadata?.labels };
    pod.metadata['annotations'] = { ...(pod.metadata['annotations'] as Record<string, string>), ...spec.additionalPodMetadata?.annotations };
    host.touch('pods', `${namespace}/${sandboxName}`);
  });
  fillPool(host, namespace, pool);
}

/** A bound claim's Ready condition follows its Sandbox's pod, as the controller forwards the Sandbox's. */
export function claimStatus(host: ControllerHost, namespace: string, claim: Obj): void {
  const bound = (claim['status'] as { sandbox?: { name?: string } } | undefined)?.sandbox?.name;
  if (bound === undefined) return;
  const pod = host.store('pods').get(`${namespace}/${bound}`);
  const running = (pod?.['status'] as { phase?: string } | undefined)?.phase === 'Running';
  if (running) setReady(claim, true, 'DependenciesReady', 'Pod is Ready');
}
