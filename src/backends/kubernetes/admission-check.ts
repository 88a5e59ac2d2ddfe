import { createHash, randomBytes } from 'node:crypto';
import type { Logger } from '../../logging/logger.js';
import { apiMessage, apiStatusOf, fromKubeError, type KubeClient } from './kube-client.js';
import { sandboxPod } from './manifests.js';
import { ephemeralPodName } from './names.js';
import type { KubernetesSettings } from './settings.js';

/** The tenant of the start-up check's pod (nothing is stored under it). */
const CHECK_TENANT = 'start-up-check';

/**
 * That the namespace exists and admits a sandbox pod as berth writes it for these settings: the
 * pod is created with `dryRun=All`, so the API server runs everything a real create runs (the
 * namespace, validation, Pod Security, LimitRange, ResourceQuota's "must specify") and stores
 * nothing. A list would not tell: it answers 200 for a namespace that does not exist.
 *
 * A namespace whose quota is used up right now is not a start-up error (sandboxes that go free
 * room; the first create then says so): only logged.
 *
 * @throws ConfigError for a missing namespace; BerthError `engine_refused` with the admission's refusal.
 */
export async function checkPodAdmitted(client: KubeClient, k: KubernetesSettings, installation: string, log: Logger): Promise<void> {
  const identity = { installation, tenant: CHECK_TENANT, profile: 'default', key: 'session:start-up-check' };
  const digest = createHash('sha256').update(JSON.stringify(['start-up-check', installation])).digest('hex');
  const pod = sandboxPod({ identity, digest, ephemeral: true, rule: 'start-up-check', name: ephemeralPodName(digest, randomBytes(6).toString('hex')), mount: null, kubernetes: k });
  try {
    await client.core.createNamespacedPod({ namespace: client.namespace, body: pod, dryRun: 'All', fieldValidation: 'Strict' });
  } catch (err) {
    const message = apiMessage(err) ?? '';
    const status = apiStatusOf(err);
    if (status === 403 && quotaUsedUp(message)) {
      log.warn(`kubernetes: namespace "${client.namespace}" has no room for another sandbox pod right now (${message}); new sandboxes fail until some go`);
      return;
    }
    // An admission webhook with side effects refuses every dry run (and admits real creates): this check cannot be made there.
    if (status === 400 && /does not support dry run/i.test(message)) {
      log.warn(`kubernetes: namespace "${client.namespace}" cannot be checked at start-up with a dry run (${message}); a pod its admission refuses fails at the first sandbox instead`);
      return;
    }
    throw fromKubeError(client, err, 'create a sandbox pod as a dry run (dryRun=All: the start-up check that the namespace exists and admits berth\'s pods)');
  }
}

/**
 * Whether a ResourceQuota refusal (`exceeded quota: NAME, requested: k=v,..., used: ..., limited:
 * ...`, the admission plugin's wording) is only the namespace being full now: the pod alone fits
 * under every exceeded limit. One that can never fit (it alone asks for more) is not.
 */
export function quotaUsedUp(message: string): boolean {
  // A quota whose usage its controller has not counted yet refuses every pod for a moment.
  if (/status unknown for quota/.test(message)) return true;
  const m = /exceeded quota: [^,]+, requested: (\S+), used: (\S+), limited: (\S+)/.exec(message);
  if (m === null) return false;
  const parse = (list: string): Map<string, number> => new Map(list.replace(/,$/, '').split(',').map((kv) => {
    const [k, v] = kv.split('=');
    return [k ?? '', quantity(v ?? '')] as const;
  }));
  const requested = parse(m[1]!);
  const limited = parse(m[3]!);
  // A figure berth cannot read is not taken as "never fits": the first create says what it says.
  return [...requested].every(([k, want]) => {
    const limit = limited.get(k) ?? Number.NaN;
    return !Number.isFinite(want) || !Number.isFinite(limit) || want <= limit;
  });
}

const SUFFIX: Record<string, number> = {
  n: 1e-9, u: 1e-6, m: 1e-3, k: 1e3, M: 1e6, G: 1e9, T: 1e12, P: 1e15, E: 1e18,
  Ki: 2 ** 10, Mi: 2 ** 20, Gi: 2 ** 30, Ti: 2 ** 40, Pi: 2 ** 50, Ei: 2 ** 60,
};

/** A Kubernetes quantity (`2`, `500m`, `4Gi`, `1e3`) as a number; NaN for anything else. */
function quantity(q: string): number {
  const m = /^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)(n|u|m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$/.exec(q);
  if (m === null) return Number.NaN;
  return Number(m[1]) * (m[2] === undefined ? 1 : SUFFIX[m[2]] ?? Number.NaN);
}
