import { randomBytes, randomUUID } from 'node:crypto';
import { reconcileSandbox, type ControllerHost } from './sandbox-controller.js';

/*
 * A sketch of agent-sandbox's warm pool and claim controllers (v0.5, extensions), for the calls
 * berth makes: a `SandboxWarmPool` keeps `replicas` unclaimed Sandboxes made from its
 * `SandboxTemplate`'s pod template (each then gets its pod from the Sandbox controller sketch);
 * a `SandboxClaim` on the pool is bound to one of them: the Sandbox is owned by the claim from
 * then on (deleted with it), its pod gets the claim's `additionalPodMetadata`, the claim's
 * `status.sandbox.name` names it, and the pool is filled again. Not emulated: making a Sandbox
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
        name: sandboxName, namespace, uid: randomUUID(), resourceVersion: host.nextVersion(), creationTimestamp: new Date().toISOString(),
        labels: { [POOL_LABEL]: name }, ownerReferences: [ownerRef('SandboxWarmPool', 'extensions.agents.x-k8s.io/v1beta1', pool)],
      },
      spec: { podTemplate: structuredClone(podTemplate) },
    };
    host.store('sandboxes').set(`${namespace}/${sandboxName}`, sandbox);
    reconcileSandbox(host, namespace, sandbox);
  }
}

/** Binds a new claim to one of its pool's unclaimed Sandboxes (and fills the pool again); none free: it stays unbound. */
export function bindClaim(host: ControllerHost, namespace: string, claim: Obj): void {
  const spec = claim['spec'] as { warmPoolRef: { name: string }; additionalPodMetadata?: { labels?: Record<string, string>; annotations?: Record<string, string> } };
  const poolName = spec.warmPoolRef.name;
  const free = unclaimed(host, namespace, poolName)[0];
  if (free === undefined) return;
  const [, sandbox] = free;
  const labels = { ...(sandbox.metadata['labels'] as Record<string, string>) };
  delete labels[POOL_LABEL];
  sandbox.metadata['labels'] = labels;
  sandbox.metadata['ownerReferences'] = [ownerRef('SandboxClaim', 'extensions.agents.x-k8s.io/v1beta1', claim)];
  const sandboxName = String(sandbox.metadata['name']);
  const pod = host.store('pods').get(`${namespace}/${sandboxName}`);
  if (pod !== undefined) {
    pod.metadata['labels'] = { ...(pod.metadata['labels'] as Record<string, string>), ...spec.additionalPodMetadata?.labels };
    pod.metadata['annotations'] = { ...(pod.metadata['annotations'] as Record<string, string>), ...spec.additionalPodMetadata?.annotations };
  }
  claim['status'] = {
    sandbox: { name: sandboxName },
    conditions: [{ type: 'Ready', status: 'True', reason: 'SandboxBound', message: `bound to sandbox ${sandboxName}`, lastTransitionTime: new Date().toISOString() }],
  };
  const pool = host.store('sandboxwarmpools').get(`${namespace}/${poolName}`);
  if (pool !== undefined) fillPool(host, namespace, pool);
}
