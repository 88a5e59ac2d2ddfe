import { createHash, randomUUID } from 'node:crypto';
import type { V1PodSpec, V1Volume } from '@kubernetes/client-node';

/*
 * A sketch of kubernetes-sigs/agent-sandbox's Sandbox controller (v0.5, controllers/
 * sandbox_controller.go), for the calls berth makes: on create, a claim `<template>-<sandbox>`
 * per volumeClaimTemplate and a pod named after the Sandbox from its podTemplate, the claim
 * volumes merged in under the templates' names, both owned by the Sandbox (controller owner
 * reference) and labelled with `agents.x-k8s.io/sandbox-name-hash`; the Sandbox's Ready condition
 * follows its pod, and a deleted pod is made again. Not emulated: operatingMode Suspended, shutdown times, services, warm pools and
 * claims (SandboxClaim), updates after create, the controller's own adoption rules.
 */

type Obj = Record<string, unknown> & { metadata: Record<string, unknown> };

export interface ControllerHost {
  /** Read only: objects change through `put` and `touch`, so watches hear of it. */
  store(plural: string): Map<string, Obj>;
  /** Stores a new object (its resourceVersion is given then). */
  put(plural: string, key: string, obj: Obj): void;
  /** Says the object at `key` was changed in place. */
  touch(plural: string, key: string): void;
  /** Why admission refuses a pod of this spec in `namespace` (LimitRange defaults are filled in), or undefined. */
  admit(namespace: string, spec: V1PodSpec): string | undefined;
  startPod(key: string, pod: Obj): void;
  /** Runs `fn` after `ms` (a timer the server clears when it stops). */
  later(ms: number, fn: () => void): void;
}

export const NAME_HASH_LABEL = 'agents.x-k8s.io/sandbox-name-hash';

interface SandboxSpec {
  podTemplate: { metadata?: { labels?: Record<string, string>; annotations?: Record<string, string> }; spec: V1PodSpec };
  volumeClaimTemplates?: { metadata: { name: string; labels?: Record<string, string> }; spec: Record<string, unknown> }[];
}

function meta(namespace: string, name: string, labels: Record<string, string>, owner: object): Record<string, unknown> {
  return { name, namespace, labels, uid: randomUUID(), creationTimestamp: new Date().toISOString(), ownerReferences: [owner] };
}

function setReady(sandbox: Obj, ready: boolean, reason: string, message: string): void {
  sandbox['status'] = { conditions: [{ type: 'Ready', status: ready ? 'True' : 'False', reason, message, lastTransitionTime: new Date().toISOString(), observedGeneration: 1 }] };
}

/** Makes the claims and the pod of a Sandbox just created. */
export function reconcileSandbox(host: ControllerHost, namespace: string, sandbox: Obj): void {
  const name = String(sandbox.metadata['name']);
  const spec = sandbox['spec'] as SandboxSpec;
  const hash = createHash('sha256').update(name).digest('hex').slice(0, 8);
  const owner = { apiVersion: 'agents.x-k8s.io/v1beta1', kind: 'Sandbox', name, uid: sandbox.metadata['uid'], controller: true, blockOwnerDeletion: true };
  const volumes: V1Volume[] = [];
  for (const t of spec.volumeClaimTemplates ?? []) {
    const claim = `${t.metadata.name}-${name}`;
    volumes.push({ name: t.metadata.name, persistentVolumeClaim: { claimName: claim } });
    const claims = host.store('persistentvolumeclaims');
    if (claims.has(`${namespace}/${claim}`)) continue;
    host.put('persistentvolumeclaims', `${namespace}/${claim}`, {
      apiVersion: 'v1', kind: 'PersistentVolumeClaim',
      metadata: meta(namespace, claim, { ...t.metadata.labels, [NAME_HASH_LABEL]: hash }, owner),
      spec: t.spec, status: { phase: 'Bound' },
    });
  }
  const podSpec: V1PodSpec = { ...spec.podTemplate.spec, volumes: [...(spec.podTemplate.spec.volumes ?? []).filter((v) => !volumes.some((c) => c.name === v.name)), ...volumes] };
  const refused = host.admit(namespace, podSpec);
  const sandboxKey = `${namespace}/${name}`;
  if (refused !== undefined) {
    setReady(sandbox, false, 'PodCreationFailed', `pods "${name}" is forbidden: ${refused}`);
    host.touch('sandboxes', sandboxKey);
    return;
  }
  const pod: Obj = {
    apiVersion: 'v1', kind: 'Pod',
    metadata: {
      ...meta(namespace, name, { ...spec.podTemplate.metadata?.labels, [NAME_HASH_LABEL]: hash }, owner),
      annotations: { ...spec.podTemplate.metadata?.annotations },
    },
    spec: podSpec,
    status: { phase: 'Pending' },
  };
  host.put('pods', `${namespace}/${name}`, pod);
  host.startPod(`${namespace}/${name}`, pod);
  setReady(sandbox, false, 'DependenciesNotReady', 'Pod is not ready');
  host.touch('sandboxes', sandboxKey);
}

/**
 * The Sandbox's Ready condition from its pod, as the controller keeps it: True while the pod
 * runs, False with the reason once it ended (the controller leaves an ended pod in place) or
 * while there is none.
 */
export function sandboxStatus(host: ControllerHost, namespace: string, sandbox: Obj): void {
  const pod = host.store('pods').get(`${namespace}/${String(sandbox.metadata['name'])}`);
  const phase = (pod?.['status'] as { phase?: string } | undefined)?.phase;
  if (pod === undefined) setReady(sandbox, false, 'DependenciesNotReady', 'Pod does not exist');
  else if (phase === 'Running') setReady(sandbox, true, 'DependenciesReady', 'Pod is Ready');
  else if (phase === 'Succeeded') setReady(sandbox, false, 'PodSucceeded', 'Pod completed successfully');
  else if (phase === 'Failed') setReady(sandbox, false, 'PodFailed', 'Pod failed');
}

/**
 * A pod of a Sandbox is gone (deleted, by someone or by garbage collection): its controller,
 * which watches the pods it owns, makes it again while the Sandbox exists, as the real one does
 * when it finds no pod. The Sandbox of `ownerUid`, if it still exists, is reconciled.
 */
export function podGone(host: ControllerHost, namespace: string, ownerUid: string): void {
  for (const [key, sandbox] of host.store('sandboxes')) {
    if (key.startsWith(`${namespace}/`) && sandbox.metadata['uid'] === ownerUid) reconcileSandbox(host, namespace, sandbox);
  }
}
