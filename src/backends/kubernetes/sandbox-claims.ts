import type { V1ObjectMeta, V1Pod } from '@kubernetes/client-node';
import { BackendUnavailableError, TimeoutError } from '../../errors.js';
import type { SandboxIdentity } from '../../scope/naming.js';
import { AGENT_SANDBOX_EXTENSIONS_API, sandboxClaimResource } from './agent-sandbox-manifests.js';
import { podOfOwnSandbox } from './agent-sandboxes.js';
import type { ExecTarget } from './spawn.js';
import { apiStatusOf, fromKubeError, type KubeClient } from './kube-client.js';
import { IDENTITY_ANNOTATION, KEY_DOMAIN } from './labels.js';
import { assertNoHostMount, tenantNetworkPolicy } from './manifests.js';
import { ephemeralPodName } from './names.js';
import { ensureNetworkPolicy } from './network-policies.js';
import { podEnded } from './pod-sandboxes.js';
import { notOwnedBy, ownerKeysMissing, readPod } from './pods.js';
import type { KubernetesSettings } from './settings.js';
import { watchObject } from './watch.js';

/*
 * Mode agent-sandbox with a warm pool: an ephemeral identity claims a ready Sandbox from the
 * profile's `SandboxWarmPool` with a `SandboxClaim` (extensions.agents.x-k8s.io/v1beta1). The
 * controller binds the claim to a pre-made Sandbox (`status.sandbox.name`), gives that Sandbox's
 * pod the claim's `additionalPodMetadata` (berth's labels), and deletes the Sandbox with the
 * claim (`shutdownPolicy: Delete`). berth execs into the bound Sandbox's pod only once it is the
 * controller's pod of that Sandbox and carries this identity's labels.
 */

const GROUP = 'extensions.agents.x-k8s.io';
const VERSION = AGENT_SANDBOX_EXTENSIONS_API.split('/')[1] as string;
const PLURAL = 'sandboxclaims';

interface ClaimCondition {
  type: string;
  status: string;
  reason?: string;
  message?: string;
}

interface ClaimObject {
  metadata: V1ObjectMeta;
  status?: { sandbox?: { name?: string }; conditions?: ClaimCondition[] };
}

/**
 * Ready reasons with which the claim controller gives up on a claim (it never binds it): waiting
 * longer cannot help, so berth fails at once with the controller's own words and the fix.
 */
const HOPELESS_REASONS: Readonly<Record<string, string>> = {
  InvalidMetadata: `add ${KEY_DOMAIN} to the agent-sandbox controller's allowed label domains (the file /etc/sandbox-config/allowed-label-domains in its pod, see deploy/README.md)`,
  WarmPoolNotFound: 'create the SandboxWarmPool or fix kubernetes.warmPool',
  TemplateNotFound: 'create the SandboxTemplate the warm pool names',
  EnvVarsInjectionRejected: 'check the SandboxTemplate\'s envVarsInjectionPolicy',
  VolumeClaimTemplatesError: 'check the SandboxTemplate\'s volumeClaimTemplates policy',
};

function readyOf(claim: ClaimObject): ClaimCondition | undefined {
  return claim.status?.conditions?.find((c) => c.type === 'Ready');
}

function said(c: ClaimCondition | undefined): string {
  return c === undefined ? 'the controller has not reported on it' : `the controller says ${c.reason ?? '?'}${c.message === undefined ? '' : `: ${c.message}`}`;
}

async function readClaim(client: KubeClient, name: string): Promise<ClaimObject | undefined> {
  try {
    return (await client.custom.getNamespacedCustomObject({ group: GROUP, version: VERSION, namespace: client.namespace, plural: PLURAL, name })) as ClaimObject;
  } catch (err) {
    if (apiStatusOf(err) === 404) return undefined;
    throw fromKubeError(client, err, `read sandboxclaim ${name}`);
  }
}

/** Deletes a claim (and with it, by its shutdown policy, the Sandbox it holds); one already gone is success. */
export async function deleteClaimResource(client: KubeClient, name: string): Promise<void> {
  try {
    await client.custom.deleteNamespacedCustomObject({ group: GROUP, version: VERSION, namespace: client.namespace, plural: PLURAL, name });
  } catch (err) {
    if (apiStatusOf(err) !== 404) throw fromKubeError(client, err, `delete sandboxclaim ${name}`);
  }
}

/** The Sandbox a claim is bound to, once the controller bound it. */
export async function claimedSandbox(client: KubeClient, claim: string): Promise<string | undefined> {
  return (await readClaim(client, claim))?.status?.sandbox?.name;
}

/**
 * Waits until the controller bound the claim (`status.sandbox.name`). A Ready condition whose
 * reason means the controller gave up fails at once, naming its reason and the fix; at the
 * deadline the error says what the controller last reported.
 */
async function waitForBinding(client: KubeClient, claim: string, timeoutMs: number, pool: string, known: ClaimObject): Promise<string> {
  let last: ClaimObject | undefined;
  return watchObject<ClaimObject, string>(client, {
    collection: `/apis/${GROUP}/${VERSION}/namespaces/${encodeURIComponent(client.namespace)}/${PLURAL}`, name: claim, timeoutMs, known, doing: `wait for sandboxclaim ${claim} to be bound`,
    decide: (found) => {
      if (found === undefined) throw new BackendUnavailableError(`kubernetes: sandboxclaim ${claim} vanished before the agent-sandbox controller bound it`);
      last = found;
      const bound = found.status?.sandbox?.name;
      if (bound !== undefined && bound !== '') return { value: bound };
      const ready = readyOf(found);
      const fix = ready?.status === 'False' && ready.reason !== undefined ? HOPELESS_REASONS[ready.reason] : undefined;
      if (fix !== undefined) throw new BackendUnavailableError(`kubernetes: sandboxclaim ${claim} on warm pool ${pool} cannot be bound: ${said(ready)}; ${fix}`);
      return undefined;
    },
    timedOut: () => new TimeoutError(
      `kubernetes: sandboxclaim ${claim} on warm pool ${pool} was not bound to a sandbox within ${Math.round(timeoutMs / 1000)} s (${said(last === undefined ? undefined : readyOf(last))}); check the pool (kubectl get sandboxwarmpool ${pool} -n ${client.namespace}) and the agent-sandbox controller, or raise kubernetes.podStartTimeoutSeconds`,
    ),
  });
}

/**
 * True when a bound claim's pod can no longer be the one its session ran in: it ended
 * (restartPolicy Never: it never runs again), is going or gone, or is a new pod the Sandbox's
 * controller made in its place, which has not got the claim's labels.
 */
function claimedPodOut(pod: V1Pod | undefined): boolean {
  return pod === undefined || pod.metadata?.deletionTimestamp !== undefined || podEnded(pod) || ownerKeysMissing(pod.metadata);
}

export interface ClaimInput {
  identity: SandboxIdentity;
  digest: string;
  rule: string;
  mount: string | null;
  kubernetes: KubernetesSettings;
  /** The claim the caller recorded for this identity, if any: reattached only by that name. */
  knownName: string | undefined;
  unique: () => string;
}

/**
 * An ephemeral identity's claim on the warm pool: reattached by its recorded name while its pod
 * still runs as claimed, else a new one; `recreated`: a recorded claim was gone or its pod was out.
 */
export async function ensureClaimedSandbox(client: KubeClient, input: ClaimInput): Promise<{ claim: string; target: ExecTarget; recreated: boolean }> {
  assertNoHostMount(input.mount);
  const k = input.kubernetes;
  const pool = k.warmPool as string;
  const timeoutMs = k.podStartTimeoutSeconds * 1000;
  const owner = { installation: input.identity.installation, digest: input.digest };
  if (input.knownName !== undefined) {
    const known = await readClaim(client, input.knownName);
    const bound = known?.status?.sandbox?.name;
    if (known !== undefined && known.metadata.deletionTimestamp === undefined && bound !== undefined && notOwnedBy(known.metadata as Parameters<typeof notOwnedBy>[0], owner) === undefined) {
      if (!claimedPodOut(await readPod(client, bound))) {
        return { claim: input.knownName, target: await podOfOwnSandbox(client, bound, undefined, owner, k), recreated: false };
      }
      // Its pod ended or went, and the session's files with it (emptyDir volumes): a new claim replaces it.
      await deleteClaimResource(client, input.knownName);
    }
  }
  // Before the claim: the pool pod is under the tenant's policy from the moment it carries berth's labels.
  if (k.networkPolicy) await ensureNetworkPolicy(client, tenantNetworkPolicy(input.identity.installation, input.identity.tenant, k));
  const claim = ephemeralPodName(input.digest, input.unique());
  const body = sandboxClaimResource({ identity: input.identity, digest: input.digest, ephemeral: true, rule: input.rule, name: claim, mount: null, kubernetes: k });
  let created: ClaimObject;
  try {
    created = (await client.custom.createNamespacedCustomObject({ group: GROUP, version: VERSION, namespace: client.namespace, plural: PLURAL, body, fieldValidation: 'Strict' })) as ClaimObject;
  } catch (err) {
    if (apiStatusOf(err) === 409) {
      throw new BackendUnavailableError(`kubernetes: the new sandboxclaim's name ${claim} is taken; an ephemeral sandbox is never adopted, so nothing was created. Try again`, { cause: err });
    }
    throw fromKubeError(client, err, `create sandboxclaim ${claim} on warm pool ${pool}`);
  }
  try {
    const sandbox = await waitForBinding(client, claim, timeoutMs, pool, created);
    return { claim, target: await podOfOwnSandbox(client, sandbox, undefined, owner, k), recreated: input.knownName !== undefined };
  } catch (err) {
    await deleteClaimResource(client, claim).catch(() => undefined);
    throw err;
  }
}

/** This installation's claims, by label selector, with whether each is bound. */
export async function listClaims(client: KubeClient, labelSelector: string): Promise<{ name: string; digest: string; bound: boolean; deleting: boolean }[]> {
  try {
    const list = (await client.custom.listNamespacedCustomObject({ group: GROUP, version: VERSION, namespace: client.namespace, plural: PLURAL, labelSelector })) as { items: ClaimObject[] };
    return list.items.map((c) => ({
      name: c.metadata.name ?? '',
      digest: c.metadata.annotations?.[IDENTITY_ANNOTATION] ?? '',
      bound: (c.status?.sandbox?.name ?? '') !== '',
      deleting: c.metadata.deletionTimestamp !== undefined,
    }));
  } catch (err) {
    throw fromKubeError(client, err, `list sandboxclaims (${labelSelector})`);
  }
}
