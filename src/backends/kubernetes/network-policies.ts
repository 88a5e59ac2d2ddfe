import type { V1NetworkPolicy } from '@kubernetes/client-node';
import { BackendUnavailableError } from '../../errors.js';
import { apiStatusOf, fromKubeError, type KubeClient } from './kube-client.js';
import { installationSelector, LABEL, NETWORK_LABEL } from './labels.js';
import type { ProxyAddress } from '../../egress/proxy-address.js';
import { tenantNetworkPolicy } from './manifests.js';
import { proxyNetworkPolicy, proxyReach } from './proxy-egress.js';
import { KUBERNETES_NETWORKS, type KubernetesNetwork, type KubernetesSettings } from './settings.js';

/*
 * The tenant NetworkPolicies as they live in the cluster. berth reads each one back (at start-up,
 * and whenever it makes sure one exists) and refuses to go on when the live spec is not the one it
 * writes: someone edited it, or an admission webhook changed it. An error, not a warning: the
 * policy is all that keeps a hostile command off the cluster network, berth tells callers what it
 * admits (explain, the README), and a warning in a log would let sandboxes run under a policy
 * nobody checked. An operator who manages policies sets networkPolicy: false.
 */

/** Shown of a differing value at most, so one line stays readable. */
const VALUE_CHARS = 120;
/** Differences named in an error at most. */
const DIFFERENCES_SHOWN = 3;

/**
 * A spec as the API server keeps it, for comparing (`key`: the field holding `value`, or holding
 * the list it is an item of): lists that are empty or absent are one
 * thing (Go's `omitempty` drops an empty list), a port's protocol defaults to TCP, and keys
 * that are undefined are absent. Empty objects stay: `namespaceSelector: {}` (every namespace)
 * is not an absent one (the policy's own namespace).
 */
function normalized(value: unknown, key = ''): unknown {
  if (Array.isArray(value)) return value.map((v) => normalized(v, key));
  if (value === null || typeof value !== 'object') return value;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value as Record<string, unknown>)) {
    if (v === undefined || v === null || (Array.isArray(v) && v.length === 0)) continue;
    out[k] = normalized(v, k);
  }
  if (key === 'ports') out['protocol'] ??= 'TCP';
  return out;
}

function shown(value: unknown): string {
  const text = value === undefined ? 'absent' : JSON.stringify(value);
  return text.length <= VALUE_CHARS ? text : `${text.slice(0, VALUE_CHARS - 3)}...`;
}

/** Where two normalized values differ, as `path: is X, berth writes Y`, outermost first. */
function differences(live: unknown, want: unknown, path: string): string[] {
  if (JSON.stringify(live) === JSON.stringify(want)) return [];
  const bothArrays = Array.isArray(live) && Array.isArray(want);
  const bothObjects = !bothArrays && [live, want].every((v) => v !== null && typeof v === 'object' && !Array.isArray(v));
  if (bothArrays && [...live, ...want].every((v) => typeof v === 'string')) {
    const lacks = want.filter((v) => !live.includes(v));
    const adds = live.filter((v) => !want.includes(v));
    if (lacks.length + adds.length > 0) return [`${path}: ${[lacks.length > 0 ? `lacks ${shown(lacks)}` : '', adds.length > 0 ? `adds ${shown(adds)}` : ''].filter(Boolean).join(' and ')}`];
  }
  if (bothArrays && live.length === want.length) return live.flatMap((v, i) => differences(v, want[i], `${path}[${i}]`));
  if (bothObjects) {
    const l = live as Record<string, unknown>;
    const w = want as Record<string, unknown>;
    return [...new Set([...Object.keys(w), ...Object.keys(l)])].flatMap((k) => differences(l[k], w[k], `${path}.${k}`));
  }
  return [`${path}: is ${shown(live)}, berth writes ${shown(want)}`];
}

/**
 * How the live policy's spec differs from the one berth writes ([] when it does not). Only the
 * spec decides what a pod may reach; labels and annotations others add are theirs.
 *
 * @example
 * policyDifferences(live, tenantNetworkPolicy(inst, tenant, k)) // ['spec.ingress: is [{}], berth writes absent']
 */
export function policyDifferences(live: V1NetworkPolicy, want: V1NetworkPolicy): string[] {
  return differences(normalized(live.spec), normalized(want.spec), 'spec');
}

function driftError(client: KubeClient, drifted: { name: string; differences: string[] }[]): BackendUnavailableError {
  const each = drifted.map((d) => {
    const more = d.differences.length > DIFFERENCES_SHOWN ? `; and ${d.differences.length - DIFFERENCES_SHOWN} more` : '';
    return `${d.name} (${d.differences.slice(0, DIFFERENCES_SHOWN).join('; ')}${more})`;
  });
  const names = drifted.map((d) => d.name).join(' ');
  return new BackendUnavailableError(
    `kubernetes: NetworkPolicy ${each.join(', ')} in namespace "${client.namespace}" is not what berth writes: someone edited it or an admission webhook changed it, so berth cannot vouch for its sandboxes' network; ` +
      `delete it (kubectl delete networkpolicy -n ${client.namespace} ${names}) and berth writes it again before the tenant's next sandbox, or set kubernetes.networkPolicy: false to manage network policy yourself`,
  );
}

async function readPolicy(client: KubeClient, name: string): Promise<V1NetworkPolicy | undefined> {
  try {
    return await client.networking.readNamespacedNetworkPolicy({ namespace: client.namespace, name });
  } catch (err) {
    if (apiStatusOf(err) === 404) return undefined;
    throw fromKubeError(client, err, `read networkpolicy ${name}`);
  }
}

/**
 * Makes sure the tenant's NetworkPolicy exists as berth writes it: read, created when absent
 * (by whichever process comes first), and the object the API server keeps compared with the
 * manifest (a create's answer is the object after admission). A differing one is an error.
 */
export async function ensureNetworkPolicy(client: KubeClient, manifest: V1NetworkPolicy): Promise<void> {
  const name = manifest.metadata!.name!;
  let live = await readPolicy(client, name);
  if (live === undefined) {
    try {
      live = await client.networking.createNamespacedNetworkPolicy({ namespace: client.namespace, body: manifest, fieldValidation: 'Strict' }, client.idempotent);
    } catch (err) {
      if (apiStatusOf(err) !== 409) throw fromKubeError(client, err, `create networkpolicy ${name}`);
      live = await readPolicy(client, name);
      if (live === undefined) throw new BackendUnavailableError(`kubernetes: networkpolicy ${name} was reported to exist and then was gone; try again`);
    }
  }
  const found = policyDifferences(live, manifest);
  if (found.length > 0) throw driftError(client, [{ name, differences: found }]);
}

/**
 * Start-up: every NetworkPolicy of this installation in the namespace compared with what berth
 * would write for its tenant and network reach under these settings (which every place of the
 * installation shares: settings.ts' installation-wide keys), the proxy's for its address `proxy`
 * (the shared listener's, when allowlist pods reach it). One error names every one that differs.
 */
export async function checkNetworkPolicies(client: KubeClient, installation: string, k: KubernetesSettings, proxy?: ProxyAddress): Promise<void> {
  let policies: V1NetworkPolicy[];
  try {
    policies = (await client.networking.listNamespacedNetworkPolicy({ namespace: client.namespace, labelSelector: installationSelector(installation) })).items;
  } catch (err) {
    throw fromKubeError(client, err, `list networkpolicies (${installationSelector(installation)})`);
  }
  const drifted: { name: string; differences: string[] }[] = [];
  for (const live of policies) {
    const name = live.metadata?.name ?? '?';
    const tenant = live.metadata?.annotations?.[LABEL.tenant];
    const network = live.metadata?.labels?.[NETWORK_LABEL];
    if (live.metadata?.annotations?.[LABEL.installation] !== installation) continue;
    const reachesProxy = network?.startsWith('proxy-') === true;
    if (tenant === undefined || (!reachesProxy && !KUBERNETES_NETWORKS.includes(network as KubernetesNetwork))) {
      drifted.push({ name, differences: [`metadata: its ${LABEL.tenant} annotation or ${NETWORK_LABEL} label is missing or unknown`] });
      continue;
    }
    // A policy for the proxy at another address (or other pods of berth's) selects only the pods
    // made for that one, and berth makes none of those any more: there is nothing to compare it with.
    if (reachesProxy && (proxy === undefined || proxyReach(proxy, k.proxyPods) !== network)) continue;
    const want = reachesProxy ? proxyNetworkPolicy(installation, tenant, k, proxy!) : tenantNetworkPolicy(installation, tenant, { ...k, network: network as KubernetesNetwork });
    const found = want.metadata?.name === name ? policyDifferences(live, want) : [`metadata.name: berth names this tenant's policy ${want.metadata?.name}`];
    if (found.length > 0) drifted.push({ name, differences: found });
  }
  if (drifted.length > 0) throw driftError(client, drifted);
}
