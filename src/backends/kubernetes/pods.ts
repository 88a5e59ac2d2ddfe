import type { V1PersistentVolumeClaim, V1Pod } from '@kubernetes/client-node';
import { BackendUnavailableError, BerthError, PolicyRefusedError, TimeoutError } from '../../errors.js';
import { apiStatusOf, fromKubeError, type KubeClient } from './kube-client.js';
import { IDENTITY_ANNOTATION, LABEL, labelValue } from './labels.js';
import { watchObject } from './watch.js';

/*
 * Pod lifecycle against the API server (docs/design.md §6). Every create asks for strict field
 * validation, so an API server that does not know a field refuses the object instead of
 * dropping the field (a dropped security field would fail open).
 */

const STRICT = 'Strict';
/** How long an image that fails to pull is waited for by default: the kubelet's retries at about 10 s and 30 s. */
const DEFAULT_IMAGE_PULL_TIMEOUT_MS = 60_000;

/** Whose object a pod or claim must be for berth to use it. */
export interface Owner {
  installation: string;
  /** Hex sha256 of the sandbox identity. */
  digest: string;
}

export interface AdoptResult<T> {
  object: T;
  /** False: berth created it now; true: it existed (this installation's, this identity's) and was adopted. */
  adopted: boolean;
}

/** The API path of the client's namespace's pods, for watches. */
export function podsPath(client: KubeClient): string {
  return `/api/v1/namespaces/${encodeURIComponent(client.namespace)}/pods`;
}

/** True when an object carries none of berth's ownership keys yet (a controller has still to copy them onto it). */
export function ownerKeysMissing(meta: { labels?: Record<string, string>; annotations?: Record<string, string> } | undefined): boolean {
  const labels = meta?.labels ?? {};
  const annotations = meta?.annotations ?? {};
  return labels[LABEL.managed] === undefined || labels[LABEL.installation] === undefined || annotations[LABEL.installation] === undefined || annotations[IDENTITY_ANNOTATION] === undefined;
}

/** Why an object of this name is not `owner`'s, or undefined when it is. Checks the verbatim annotations, not the (possibly hashed) labels. */
export function notOwnedBy(meta: { labels?: Record<string, string>; annotations?: Record<string, string> } | undefined, owner: Owner): string | undefined {
  const labels = meta?.labels ?? {};
  const annotations = meta?.annotations ?? {};
  if (labels[LABEL.managed] !== 'true') return 'it is not labelled as berth\'s';
  if (labels[LABEL.installation] !== labelValue(owner.installation) || annotations[LABEL.installation] !== owner.installation) {
    return `it belongs to installation ${JSON.stringify(annotations[LABEL.installation] ?? labels[LABEL.installation] ?? '?')}`;
  }
  if (annotations[IDENTITY_ANNOTATION] !== owner.digest) return 'it belongs to another sandbox identity';
  return undefined;
}

function refuseForeign(kind: string, name: string, why: string): BerthError {
  return new PolicyRefusedError(
    `kubernetes: a ${kind} named ${name} exists but ${why}; berth never adopts an object that is not its own. Delete it (kubectl delete ${kind} ${name}) if it is stale`,
  );
}

/** The pod of this name, or undefined when there is none. */
export async function readPod(client: KubeClient, name: string): Promise<V1Pod | undefined> {
  try {
    return await client.core.readNamespacedPod({ namespace: client.namespace, name });
  } catch (err) {
    if (apiStatusOf(err) === 404) return undefined;
    throw fromKubeError(client, err, `read pod ${name}`);
  }
}

/** Waits until no pod of this name exists (a deleted pod stays while it terminates). */
export async function waitForPodGone(client: KubeClient, name: string, timeoutMs: number): Promise<void> {
  await watchObject<V1Pod, undefined>(client, {
    collection: podsPath(client), name, timeoutMs, doing: `wait for pod ${name} to be gone`,
    decide: (pod) => (pod === undefined ? { value: undefined } : undefined),
    timedOut: (pod) => new TimeoutError(
      `kubernetes: pod ${name} was still terminating after ${Math.round(timeoutMs / 1000)} s (${describe(pod)}${pod?.metadata?.deletionTimestamp === undefined ? ', not deleted' : `, deleted at ${String(pod.metadata.deletionTimestamp)}`}); ` +
        `check it with kubectl describe pod ${name} -n ${client.namespace}`,
    ),
  });
}

/**
 * A persistent sandbox's pod: adopted when a pod of this (deterministic) name is this
 * installation's and this identity's, else created. A pod still terminating is waited out and
 * recreated; a race with another process of the installation ends in adopting its pod.
 */
export async function createOrAdoptPod(client: KubeClient, manifest: V1Pod, owner: Owner, timeoutMs: number): Promise<AdoptResult<V1Pod>> {
  const name = manifest.metadata!.name!;
  const existing = await readPod(client, name);
  if (existing !== undefined) {
    const why = notOwnedBy(existing.metadata, owner);
    if (why !== undefined) throw refuseForeign('pod', name, why);
    if (existing.metadata?.deletionTimestamp === undefined) return { object: existing, adopted: true };
    await waitForPodGone(client, name, timeoutMs);
  }
  try {
    return { object: await client.core.createNamespacedPod({ namespace: client.namespace, body: manifest, fieldValidation: STRICT }, client.idempotent), adopted: false };
  } catch (err) {
    if (apiStatusOf(err) !== 409) throw fromKubeError(client, err, `create pod ${name}`);
    const winner = await readPod(client, name);
    if (winner === undefined) throw fromKubeError(client, err, `create pod ${name}`);
    const why = notOwnedBy(winner.metadata, owner);
    if (why !== undefined) throw refuseForeign('pod', name, why);
    return { object: winner, adopted: true };
  }
}

/** An ephemeral sandbox's pod: always a new one; a name that is taken is an error, never adopted. */
export async function createEphemeralPod(client: KubeClient, manifest: V1Pod): Promise<V1Pod> {
  const name = manifest.metadata!.name!;
  try {
    return await client.core.createNamespacedPod({ namespace: client.namespace, body: manifest, fieldValidation: STRICT });
  } catch (err) {
    if (apiStatusOf(err) === 409) {
      throw new BackendUnavailableError(`kubernetes: the new ephemeral pod's name ${name} is taken; an ephemeral sandbox is never adopted, so nothing was created. Try again`, { cause: err });
    }
    throw fromKubeError(client, err, `create pod ${name}`);
  }
}

/** The pods matching a label selector (API string form), in the client's namespace. */
export async function listPods(client: KubeClient, labelSelector: string): Promise<V1Pod[]> {
  try {
    return (await client.core.listNamespacedPod({ namespace: client.namespace, labelSelector })).items;
  } catch (err) {
    throw fromKubeError(client, err, `list pods (${labelSelector})`);
  }
}

/** Deletes a pod; one that is already gone is success. Returns whether it existed. */
export async function deletePod(client: KubeClient, name: string): Promise<boolean> {
  try {
    await client.core.deleteNamespacedPod({ namespace: client.namespace, name });
    return true;
  } catch (err) {
    if (apiStatusOf(err) === 404) return false;
    throw fromKubeError(client, err, `delete pod ${name}`);
  }
}

/** Container waiting reasons that will not resolve by waiting longer. */
const HOPELESS = new Set(['InvalidImageName', 'ErrImageNeverPull', 'CreateContainerConfigError', 'CreateContainerError', 'RunContainerError']);
/** Waiting reasons of an image pull that failed, which the kubelet retries with a back-off (10 s, doubling to 300 s). */
const PULL_FAILING = new Set(['ErrImagePull', 'ImagePullBackOff']);

function describe(pod: V1Pod | undefined): string {
  if (pod === undefined) return 'it does not exist';
  const phase = pod.status?.phase ?? 'unknown';
  const state = pod.status?.containerStatuses?.[0]?.state;
  const waiting = state?.waiting;
  const terminated = state?.terminated;
  const unscheduled = pod.status?.conditions?.find((c) => c.type === 'PodScheduled' && c.status === 'False');
  if (waiting !== undefined) return `phase ${phase}, container waiting: ${waiting.reason ?? '?'}${waiting.message === undefined ? '' : ` (${waiting.message})`}`;
  if (terminated !== undefined) return `phase ${phase}, container ended with exit code ${terminated.exitCode} (${terminated.reason ?? '?'})`;
  if (unscheduled !== undefined) return `phase ${phase}, not scheduled: ${unscheduled.message ?? unscheduled.reason ?? '?'}`;
  return `phase ${phase}`;
}

export interface WaitForRunningOptions {
  /** A controller makes the pod (agent-sandbox): its absence is waited out too. */
  mayNotExistYet?: boolean;
  /** What a running pod still lacks (labels a controller copies onto it later), waited for like readiness; it may throw to refuse the pod outright. */
  lacks?: (pod: V1Pod) => string | undefined;
  /** How long an image pull may keep failing (ErrImagePull, ImagePullBackOff) before the wait fails. Default 60 s. */
  imagePullTimeoutMs?: number;
  /** The pod as its create answered: the watch starts there, with no list. */
  known?: V1Pod;
}

/**
 * Waits until the pod runs with its container ready, watching it. A pod that ended, vanished,
 * or whose container cannot start (a bad image name, a config error) fails at once; an image
 * that fails to pull is given `imagePullTimeoutMs` of the kubelet's retries, then fails naming
 * the image and the registry's error; one still pending at the deadline is a TimeoutError
 * saying where it stands.
 */
export async function waitForRunning(client: KubeClient, name: string, timeoutMs: number, opts: WaitForRunningOptions = {}): Promise<V1Pod> {
  const pullTimeoutMs = opts.imagePullTimeoutMs ?? DEFAULT_IMAGE_PULL_TIMEOUT_MS;
  let pullFailingSince: number | undefined;
  /** The registry's own words: ErrImagePull carries them, ImagePullBackOff only says it waits. */
  let pullError: string | undefined;
  let lacking: string | undefined;
  return watchObject<V1Pod, V1Pod>(client, {
    collection: podsPath(client), name, timeoutMs, known: opts.known, doing: `wait for pod ${name} to run`,
    wakeAt: () => (pullFailingSince === undefined ? undefined : pullFailingSince + pullTimeoutMs),
    decide: (pod) => {
      if (pod === undefined && opts.mayNotExistYet === true) return undefined;
      const ready = pod?.status?.containerStatuses?.[0]?.ready === true;
      lacking = pod === undefined || opts.lacks === undefined ? undefined : opts.lacks(pod);
      if (pod?.status?.phase === 'Running' && ready && lacking === undefined) return { value: pod };
      const waiting = pod?.status?.containerStatuses?.[0]?.state?.waiting;
      const over = pod === undefined || pod.metadata?.deletionTimestamp !== undefined || pod.status?.phase === 'Failed' || pod.status?.phase === 'Succeeded';
      if (over || (waiting?.reason !== undefined && HOPELESS.has(waiting.reason))) {
        throw new BackendUnavailableError(`kubernetes: pod ${name} cannot run: ${describe(pod)}; see kubectl describe pod ${name} -n ${client.namespace}`);
      }
      if (waiting?.reason === undefined || !PULL_FAILING.has(waiting.reason)) {
        pullFailingSince = undefined;
        return undefined;
      }
      pullFailingSince ??= Date.now();
      if (waiting.reason === 'ErrImagePull' && waiting.message !== undefined) pullError = waiting.message;
      if (Date.now() - pullFailingSince < pullTimeoutMs) return undefined;
      const image = pod?.spec?.containers[0]?.image ?? pod?.status?.containerStatuses?.[0]?.image ?? '?';
      throw new BerthError(
        'image_pull_failed',
        `kubernetes: pod ${name} cannot run: image ${JSON.stringify(image)} could not be pulled for ${Math.round(pullTimeoutMs / 1000)} s (${waiting.reason}: ${pullError ?? waiting.message ?? 'no message'}); ` +
          `check the image reference and that the cluster's nodes can pull it (registry, imagePullSecrets), or raise kubernetes.imagePullTimeoutSeconds`,
      );
    },
    timedOut: (pod) => new TimeoutError(
      `kubernetes: pod ${name} was not running within ${Math.round(timeoutMs / 1000)} s (${describe(pod)}${lacking === undefined ? '' : `; ${lacking}`}); raise kubernetes.podStartTimeoutSeconds or see kubectl describe pod ${name} -n ${client.namespace}`,
    ),
  });
}

/** A persistent sandbox's claim: adopted when it is this identity's, else created. */
export async function createOrAdoptClaim(client: KubeClient, manifest: V1PersistentVolumeClaim, owner: Owner): Promise<AdoptResult<V1PersistentVolumeClaim>> {
  const name = manifest.metadata!.name!;
  const body = { namespace: client.namespace, body: manifest, fieldValidation: STRICT };
  try {
    return { object: await client.core.createNamespacedPersistentVolumeClaim(body, client.idempotent), adopted: false };
  } catch (err) {
    if (apiStatusOf(err) !== 409) throw fromKubeError(client, err, `create persistentvolumeclaim ${name}`);
  }
  let existing: V1PersistentVolumeClaim;
  try {
    existing = await client.core.readNamespacedPersistentVolumeClaim({ namespace: client.namespace, name });
  } catch (err) {
    throw fromKubeError(client, err, `read persistentvolumeclaim ${name}`);
  }
  const why = notOwnedBy(existing.metadata, owner);
  if (why !== undefined) throw refuseForeign('persistentvolumeclaim', name, why);
  return { object: existing, adopted: true };
}

/** Deletes a claim (a persistent sandbox's files); one already gone is success. */
export async function deleteClaim(client: KubeClient, name: string): Promise<boolean> {
  try {
    await client.core.deleteNamespacedPersistentVolumeClaim({ namespace: client.namespace, name });
    return true;
  } catch (err) {
    if (apiStatusOf(err) === 404) return false;
    throw fromKubeError(client, err, `delete persistentvolumeclaim ${name}`);
  }
}
