import type { V1Pod } from '@kubernetes/client-node';
import { BackendUnavailableError, PolicyRefusedError, TimeoutError } from '../../errors.js';
import type { SandboxIdentity } from '../../scope/naming.js';
import { AGENT_SANDBOX_API, sandboxResource, type SandboxResource } from './agent-sandbox-manifests.js';
import type { ExecTarget } from './spawn.js';
import { apiStatusOf, fromKubeError, type KubeClient } from './kube-client.js';
import { assertNoHostMount, CONTAINER_NAME, tenantNetworkPolicy } from './manifests.js';
import { ephemeralPodName, persistentPodName } from './names.js';
import { ensureNetworkPolicy } from './network-policies.js';
import { podEnded } from './pod-sandboxes.js';
import { deletePod, notOwnedBy, ownerKeysMissing, podsPath, readPod, waitForRunning, type AdoptResult, type Owner } from './pods.js';
import type { KubernetesSettings } from './settings.js';
import { watchObject } from './watch.js';

/*
 * Mode `agent-sandbox`: one `Sandbox` (agents.x-k8s.io/v1beta1) per persistent identity, named
 * from the digest like a pod; its controller makes the pod (named after the Sandbox) and the
 * claim `data-<name>` from the claim template. berth then execs into that pod exactly as in
 * mode `pods`. Deleting the Sandbox deletes its pod and claims (owner references).
 */

const GROUP = 'agents.x-k8s.io';
const VERSION = AGENT_SANDBOX_API.split('/')[1] as string;
const PLURAL = 'sandboxes';

/** The Sandbox of this name, or undefined when there is none. */
async function readSandbox(client: KubeClient, name: string): Promise<SandboxResource | undefined> {
  try {
    return (await client.custom.getNamespacedCustomObject({ group: GROUP, version: VERSION, namespace: client.namespace, plural: PLURAL, name })) as SandboxResource;
  } catch (err) {
    if (apiStatusOf(err) === 404) return undefined;
    throw fromKubeError(client, err, `read sandbox ${name}`);
  }
}

/** Creates the Sandbox, or adopts it when it is this installation's and this identity's. */
export async function createOrAdoptSandbox(client: KubeClient, manifest: SandboxResource, owner: Owner): Promise<AdoptResult<SandboxResource>> {
  const name = manifest.metadata.name as string;
  try {
    const made = (await client.custom.createNamespacedCustomObject({
      group: GROUP, version: VERSION, namespace: client.namespace, plural: PLURAL, body: manifest, fieldValidation: 'Strict',
    }, client.idempotent)) as SandboxResource;
    return { object: made, adopted: false };
  } catch (err) {
    if (apiStatusOf(err) !== 409) throw fromKubeError(client, err, `create sandbox ${name}`);
  }
  const existing = await readSandbox(client, name);
  if (existing === undefined) throw new BackendUnavailableError(`kubernetes: sandbox ${name} was reported to exist and then was gone; try again`);
  const why = notOwnedBy(existing.metadata as { labels?: Record<string, string>; annotations?: Record<string, string> }, owner);
  if (why !== undefined) {
    throw new PolicyRefusedError(`kubernetes: a sandbox named ${name} exists but ${why}; berth never adopts an object that is not its own. Delete it (kubectl delete sandbox ${name}) if it is stale`);
  }
  return { object: existing, adopted: true };
}

/** Deletes a Sandbox (its controller's pod and claims go with it); one already gone is success. */
export async function deleteSandbox(client: KubeClient, name: string): Promise<boolean> {
  try {
    await client.custom.deleteNamespacedCustomObject({ group: GROUP, version: VERSION, namespace: client.namespace, plural: PLURAL, name });
    return true;
  } catch (err) {
    if (apiStatusOf(err) === 404) return false;
    throw fromKubeError(client, err, `delete sandbox ${name}`);
  }
}

/** True when `pod` was made by the controller for the Sandbox `name` (its controller owner reference). */
function podOfSandbox(pod: V1Pod, name: string, uid: string | undefined): boolean {
  return (pod.metadata?.ownerReferences ?? []).some((r) => r.controller === true && r.kind === 'Sandbox' && r.name === name && (uid === undefined || r.uid === uid));
}

export interface EnsureSandboxInput {
  identity: SandboxIdentity;
  digest: string;
  rule: string;
  mount: string | null;
  kubernetes: KubernetesSettings;
}

/**
 * An adopted Sandbox's pod that ended (restartPolicy Never: it never runs again) or is going
 * away, cleared so the controller makes a new one: it leaves an ended pod in place and makes a
 * pod only where there is none. True when there was such a pod, or none at all. A pod that is
 * not this Sandbox's is left alone (the wait refuses it).
 */
async function clearEndedPod(client: KubeClient, name: string, uid: string | undefined, timeoutMs: number): Promise<boolean> {
  const pod = await readPod(client, name);
  if (pod === undefined) return true;
  if (!podOfSandbox(pod, name, uid)) return false;
  const going = pod.metadata?.deletionTimestamp !== undefined;
  if (!going && !podEnded(pod)) return false;
  if (!going) await deletePod(client, name);
  await waitForPodOut(client, name, pod, timeoutMs);
  return true;
}

/**
 * Waits until the pod `uid` of this name is gone, watching it from `known` (the pod as read
 * before its delete). Not until no pod of the name exists: the controller makes the next one
 * under the same name as soon as the old one is gone.
 */
async function waitForPodOut(client: KubeClient, name: string, known: V1Pod, timeoutMs: number): Promise<void> {
  const uid = known.metadata?.uid;
  await watchObject<V1Pod, undefined>(client, {
    collection: podsPath(client), name, timeoutMs, known, doing: `wait for the ended pod ${name} to be gone`,
    decide: (pod) => (pod === undefined || pod.metadata?.uid !== uid ? { value: undefined } : undefined),
    timedOut: () => new TimeoutError(`kubernetes: the ended pod ${name} was still terminating after ${Math.round(timeoutMs / 1000)} s; check it with kubectl describe pod ${name} -n ${client.namespace}`),
  });
}

/**
 * A persistent identity's Sandbox, created or adopted, and its pod once it runs. The pod must
 * be the controller's for this very Sandbox, so berth never execs into a look-alike. An adopted
 * Sandbox whose pod ended or was deleted gets a new pod from its controller, its files kept on
 * the claim; `replaced` says so.
 */
export async function ensureAgentSandbox(client: KubeClient, input: EnsureSandboxInput): Promise<{ name: string; target: ExecTarget; created: boolean; replaced: boolean }> {
  assertNoHostMount(input.mount);
  const k = input.kubernetes;
  const timeoutMs = k.podStartTimeoutSeconds * 1000;
  if (k.networkPolicy) await ensureNetworkPolicy(client, tenantNetworkPolicy(input.identity.installation, input.identity.tenant, k));
  const name = persistentPodName(input.digest);
  const owner = { installation: input.identity.installation, digest: input.digest };
  const manifest = sandboxResource({ ...input, ephemeral: false, name });
  const { object, adopted } = await createOrAdoptSandbox(client, manifest, owner);
  const replaced = adopted && (await clearEndedPod(client, name, object.metadata.uid, timeoutMs));
  const pod = await waitForRunning(client, name, timeoutMs, { mayNotExistYet: true, imagePullTimeoutMs: k.imagePullTimeoutSeconds * 1000 });
  if (!podOfSandbox(pod, name, object.metadata.uid)) {
    throw new PolicyRefusedError(`kubernetes: pod ${name} is not the one the agent-sandbox controller made for sandbox ${name}; refusing to use it`);
  }
  return { name, target: { client, pod: name, container: CONTAINER_NAME }, created: !adopted, replaced };
}

/**
 * Waits for the controller's pod of Sandbox `name` to run and to carry `owner`'s labels and
 * annotations, which a claim's controller copies onto a warm-pool pod only after binding it. A
 * pod that is not that Sandbox's (owner reference) or that carries someone else's labels is
 * refused at once; one whose labels never arrive is a TimeoutError saying so. The waits are the
 * profile's (pod start, image pull), as on every create path.
 */
export async function podOfOwnSandbox(client: KubeClient, name: string, uid: string | undefined, owner: Owner, k: KubernetesSettings): Promise<ExecTarget> {
  const refuse = (why: string): never => {
    throw new PolicyRefusedError(`kubernetes: pod ${name} of sandbox ${name} cannot be used: ${why}; refusing to run commands in it`);
  };
  const lacks = (pod: V1Pod): string | undefined => {
    if (!podOfSandbox(pod, name, uid)) return refuse('it was not made by the agent-sandbox controller for that sandbox');
    if (ownerKeysMissing(pod.metadata)) return `the controller has not copied berth's labels and annotations onto it yet`;
    const why = notOwnedBy(pod.metadata, owner);
    return why === undefined ? undefined : refuse(why);
  };
  await waitForRunning(client, name, k.podStartTimeoutSeconds * 1000, { mayNotExistYet: true, lacks, imagePullTimeoutMs: k.imagePullTimeoutSeconds * 1000 });
  return { client, pod: name, container: CONTAINER_NAME };
}

/**
 * An ephemeral identity's Sandbox without a warm pool: a new, uniquely named one per creation,
 * never adopted (a taken name is an error); `knownName` (the caller's record) is reattached when
 * it is still this installation's and this identity's and its pod has not ended. `recreated`: the
 * recorded one was gone or ended.
 */
export async function ensureEphemeralSandbox(
  client: KubeClient,
  input: EnsureSandboxInput & { knownName: string | undefined; unique: () => string },
): Promise<{ name: string; target: ExecTarget; recreated: boolean }> {
  assertNoHostMount(input.mount);
  const k = input.kubernetes;
  const owner = { installation: input.identity.installation, digest: input.digest };
  if (input.knownName !== undefined) {
    const known = await readSandbox(client, input.knownName);
    if (known !== undefined && known.metadata.deletionTimestamp === undefined && notOwnedBy(known.metadata as Parameters<typeof notOwnedBy>[0], owner) === undefined) {
      const pod = await readPod(client, input.knownName);
      if (pod === undefined || !podEnded(pod)) {
        return { name: input.knownName, target: await podOfOwnSandbox(client, input.knownName, known.metadata.uid, owner, k), recreated: false };
      }
      // Its pod ended, and its files with it (emptyDir volumes): a new Sandbox replaces it.
      await deleteSandbox(client, input.knownName);
    }
  }
  if (k.networkPolicy) await ensureNetworkPolicy(client, tenantNetworkPolicy(input.identity.installation, input.identity.tenant, k));
  const name = ephemeralPodName(input.digest, input.unique());
  let made: SandboxResource;
  try {
    made = (await client.custom.createNamespacedCustomObject({
      group: GROUP, version: VERSION, namespace: client.namespace, plural: PLURAL, body: sandboxResource({ ...input, ephemeral: true, name }), fieldValidation: 'Strict',
    })) as SandboxResource;
  } catch (err) {
    if (apiStatusOf(err) === 409) {
      throw new BackendUnavailableError(`kubernetes: the new ephemeral sandbox's name ${name} is taken; an ephemeral sandbox is never adopted, so nothing was created. Try again`, { cause: err });
    }
    throw fromKubeError(client, err, `create sandbox ${name}`);
  }
  try {
    return { name, target: await podOfOwnSandbox(client, name, made.metadata.uid, owner, k), recreated: input.knownName !== undefined };
  } catch (err) {
    await deleteSandbox(client, name).catch(() => undefined);
    throw err;
  }
}

/** This installation's Sandboxes, by label selector. */
export async function listSandboxes(client: KubeClient, labelSelector: string): Promise<SandboxResource[]> {
  try {
    const list = (await client.custom.listNamespacedCustomObject({ group: GROUP, version: VERSION, namespace: client.namespace, plural: PLURAL, labelSelector })) as { items: SandboxResource[] };
    return list.items;
  } catch (err) {
    throw fromKubeError(client, err, `list sandboxes (${labelSelector})`);
  }
}
