import type { V1Pod } from '@kubernetes/client-node';
import type { Logger } from '../../logging/logger.js';
import type { SandboxIdentity } from '../../scope/naming.js';
import type { ExecTarget } from './spawn.js';
import { fromKubeError, type KubeClient } from './kube-client.js';
import { IDENTITY_ANNOTATION, installationSelector, LABEL, NETWORK_LABEL } from './labels.js';
import { assertNoHostMount, CONTAINER_NAME, sandboxDataClaim, sandboxPod, tenantNetworkPolicy, type SandboxManifestInput } from './manifests.js';
import { dataClaimName, ephemeralPodName, persistentPodName } from './names.js';
import { ensureNetworkPolicy } from './network-policies.js';
import {
  createEphemeralPod,
  createOrAdoptClaim,
  createOrAdoptPod,
  deleteClaim,
  deletePod,
  listPods,
  notOwnedBy,
  waitForPodGone,
  waitForRunning,
} from './pods.js';
import { egressCaConfigMap, ensureEgressCaConfigMap, proxyNetworkPolicy, withProxyEgress, type PodProxyEgress } from './proxy-egress.js';
import type { KubernetesSettings } from './settings.js';

/*
 * Sandboxes as plain pods (mode `pods`), docs/design.md §6: the lifecycle the backend's ensure / remove /
 * list are made of, independent of the backend seam's exact shape.
 *
 * - The tenant's NetworkPolicy exists before the tenant's first pod is created.
 * - Persistent: pod `berth-<digest>` and claim `berth-<digest>-data`, created or adopted (only
 *   when this installation's and this identity's); the claim, and so the files, outlive the pod.
 * - Ephemeral: a new uniquely named pod per creation, recorded by the caller; reattached only by
 *   that recorded name, never found by identity.
 * - A recorded pod that is gone (deleted out of band) or whose container ended (restartPolicy
 *   Never: such a pod never runs again) is replaced once, and `recreated` says so; so is one made
 *   for another network reach (the profile's egress changed): its policy is not this one's.
 * - In egress mode allowlist (`egress`), the pod reaches berth's proxy only (proxy-egress.ts). A failed
 *   create removes what it created and reports the original error.
 */

export interface EnsurePodInput {
  identity: SandboxIdentity;
  digest: string;
  ephemeral: boolean;
  rule: string;
  mount: string | null;
  kubernetes: KubernetesSettings;
  /** The pod name the caller's store recorded for this identity, if any. */
  knownName: string | undefined;
  /** 8-16 lowercase hex for a new ephemeral pod's name (the caller's id source). */
  unique: () => string;
  /** Egress mode allowlist: the pod reaches only berth's proxy, and trusts its CA. */
  egress?: PodProxyEgress | undefined;
  log?: Logger;
}

export interface PodSandbox {
  name: string;
  target: ExecTarget;
  /** True when berth made the pod now (false: adopted or reattached). */
  created: boolean;
  /** True when a recorded pod was gone and this call made a new one. */
  recreated: boolean;
}

async function readOwnPod(client: KubeClient, name: string, owner: { installation: string; digest: string }): Promise<V1Pod | undefined> {
  const pods = await listPods(client, `${installationSelector(owner.installation)},${LABEL.identity}=${owner.digest.slice(0, 40)}`);
  return pods.find((p) => p.metadata?.name === name && p.metadata.deletionTimestamp === undefined && notOwnedBy(p.metadata, owner) === undefined);
}

/** Creates, adopts or reattaches the pod of one sandbox identity and waits until it runs. */
export async function ensurePodSandbox(client: KubeClient, input: EnsurePodInput): Promise<PodSandbox> {
  assertNoHostMount(input.mount);
  const k = input.kubernetes;
  const owner = { installation: input.identity.installation, digest: input.digest };
  const timeoutMs = k.podStartTimeoutSeconds * 1000;
  const imagePullTimeoutMs = k.imagePullTimeoutSeconds * 1000;
  const { installation, tenant } = input.identity;
  const egress = input.egress;
  if (k.networkPolicy) {
    await ensureNetworkPolicy(client, egress === undefined ? tenantNetworkPolicy(installation, tenant, k) : proxyNetworkPolicy(installation, tenant, k, egress.proxy));
  }
  let podOf = sandboxPod;
  if (egress !== undefined) podOf = (m) => withProxyEgress(sandboxPod(m), egress.proxy, k.proxyPods);
  // A pod berth made for the proxy gets its CA map now, owned by it (the kubelet waits for it).
  const caMapFor = async (pod: V1Pod): Promise<void> => {
    if (egress !== undefined) await ensureEgressCaConfigMap(client, egressCaConfigMap(installation, pod, egress.ca));
  };
  const network = (m: SandboxManifestInput): string | undefined => podOf(m).metadata?.labels?.[NETWORK_LABEL];

  if (input.ephemeral && input.knownName !== undefined) {
    const known = await readOwnPod(client, input.knownName, owner);
    const wanted = network({ identity: input.identity, digest: input.digest, ephemeral: true, rule: input.rule, name: input.knownName, mount: null, kubernetes: k });
    if (known !== undefined && !podEnded(known) && known.metadata?.labels?.[NETWORK_LABEL] === wanted) {
      await waitForRunning(client, input.knownName, timeoutMs, { known, imagePullTimeoutMs });
      return { name: input.knownName, target: targetOf(client, input.knownName), created: false, recreated: false };
    }
    if (known !== undefined) await deletePod(client, input.knownName);
  }
  const name = input.ephemeral ? ephemeralPodName(input.digest, input.unique()) : persistentPodName(input.digest);
  const manifest: SandboxManifestInput = { identity: input.identity, digest: input.digest, ephemeral: input.ephemeral, rule: input.rule, name, mount: null, kubernetes: k };
  const made: (() => Promise<unknown>)[] = [];
  try {
    let adopted = false;
    let created: V1Pod;
    if (input.ephemeral) {
      created = await createEphemeralPod(client, podOf(manifest));
      made.push(() => deletePod(client, name));
      await caMapFor(created);
    } else {
      const claim = await createOrAdoptClaim(client, sandboxDataClaim(manifest), owner);
      if (!claim.adopted) made.push(() => deleteClaim(client, dataClaimName(name)));
      let pod = await createOrAdoptPod(client, podOf(manifest), owner, timeoutMs);
      const otherReach = pod.object.metadata?.labels?.[NETWORK_LABEL] !== network(manifest);
      if (pod.adopted && (podEnded(pod.object) || otherReach)) {
        const why = otherReach ? `was made for network reach ${pod.object.metadata?.labels?.[NETWORK_LABEL] ?? '(none)'}, not ${network(manifest)}` : `had ended (${pod.object.status?.phase})`;
        input.log?.info(`kubernetes: pod ${name} ${why}; replacing it, its files stay on ${dataClaimName(name)}`);
        await deletePod(client, name);
        await waitForPodGone(client, name, timeoutMs);
        pod = await createOrAdoptPod(client, podOf(manifest), owner, timeoutMs);
      }
      adopted = pod.adopted;
      created = pod.object;
      if (!adopted) {
        made.unshift(() => deletePod(client, name));
        await caMapFor(created);
      }
    }
    await waitForRunning(client, name, timeoutMs, { known: created, imagePullTimeoutMs });
    return { name, target: targetOf(client, name), created: !adopted, recreated: input.knownName !== undefined && !adopted };
  } catch (err) {
    for (const undo of made) {
      try {
        await undo();
      } catch (cleanup) {
        input.log?.warn(`kubernetes: could not remove what a failed create of ${name} made: ${(cleanup as Error).message}`);
      }
    }
    throw err;
  }
}

/** True when the pod's container ended: with restartPolicy Never such a pod never runs again. */
export function podEnded(pod: V1Pod): boolean {
  return pod.status?.phase === 'Failed' || pod.status?.phase === 'Succeeded';
}

function targetOf(client: KubeClient, pod: string): ExecTarget {
  return { client, pod, container: CONTAINER_NAME };
}

/**
 * Removes a sandbox's pod and, with `withFiles`, a persistent sandbox's claim (its files).
 * What is already gone is success.
 */
export async function removePodSandbox(client: KubeClient, name: string, opts: { withFiles: boolean }): Promise<void> {
  await deletePod(client, name);
  if (opts.withFiles) await deleteClaim(client, dataClaimName(name));
}

/** One of this installation's sandbox pods, as reapers need it. */
export interface ManagedPod {
  name: string;
  /** The full identity digest (from the annotation). */
  digest: string;
  ephemeral: boolean;
  running: boolean;
  /** A controller owns it (an agent-sandbox Sandbox's pod): it is listed through its owner, not as a bare pod. */
  controlled: boolean;
}

/**
 * This installation's sandbox pods, by label selector, and its persistent sandboxes that have no
 * pod (stopped or hibernated: their data claim is left) as not running; never another
 * installation's. Two lists (pods, claims).
 */
export async function listManagedPods(client: KubeClient, installation: string): Promise<ManagedPod[]> {
  const pods = await listPods(client, installationSelector(installation));
  const live = pods
    .filter((p) => p.metadata?.annotations?.[LABEL.installation] === installation)
    .map((p) => ({
      name: p.metadata!.name!,
      digest: p.metadata!.annotations?.[IDENTITY_ANNOTATION] ?? '',
      ephemeral: p.metadata!.labels?.[LABEL.lifecycle] === 'ephemeral',
      running: p.status?.phase === 'Running' && p.metadata?.deletionTimestamp === undefined,
      controlled: (p.metadata?.ownerReferences ?? []).some((o) => o.controller === true),
    }));
  // A persistent sandbox stopped (hibernated) has no pod, only its data claim: listed as not running.
  const names = new Set(live.map((p) => p.name));
  let claims;
  try {
    claims = (await client.core.listNamespacedPersistentVolumeClaim({ namespace: client.namespace, labelSelector: installationSelector(installation) })).items;
  } catch (err) {
    throw fromKubeError(client, err, `list persistentvolumeclaims (${installationSelector(installation)})`);
  }
  const stopped = claims
    .filter((c) => c.metadata?.annotations?.[LABEL.installation] === installation && c.metadata.deletionTimestamp === undefined
      && !(c.metadata.ownerReferences ?? []).some((o) => o.controller === true))
    .map((c) => ({ claim: c, pod: c.metadata!.name!.replace(/-data$/, '') }))
    .filter(({ claim, pod }) => claim.metadata!.name === dataClaimName(pod) && !names.has(pod) && claim.metadata!.labels?.[LABEL.lifecycle] !== 'ephemeral')
    .map(({ claim, pod }) => ({ name: pod, digest: claim.metadata!.annotations?.[IDENTITY_ANNOTATION] ?? '', ephemeral: false, running: false, controlled: false }));
  return [...live, ...stopped];
}

