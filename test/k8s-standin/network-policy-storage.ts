/*
 * A NetworkPolicy as the API server stores and returns it: its defaulting (pkg/apis/networking/
 * v1/defaults.go: a port's protocol is TCP, policyTypes is Ingress plus Egress when there are
 * egress rules) and Go's `omitempty`, which drops an empty list on the way back (`ingress: []`
 * comes back absent). Empty objects stay (`namespaceSelector: {}` is every namespace).
 */

type Json = Record<string, unknown>;

function withoutEmptyLists(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(withoutEmptyLists);
  if (value === null || typeof value !== 'object') return value;
  const out: Json = {};
  for (const [k, v] of Object.entries(value as Json)) {
    if (Array.isArray(v) && v.length === 0) continue;
    out[k] = withoutEmptyLists(v);
  }
  return out;
}

function defaultPorts(rules: unknown): void {
  for (const rule of (rules ?? []) as { ports?: Json[] }[]) for (const port of rule.ports ?? []) port['protocol'] ??= 'TCP';
}

/** The stored form of a NetworkPolicy that passed validation (the object is not changed). */
export function storedNetworkPolicy<T extends Json>(policy: T): T {
  const copy = structuredClone(policy);
  const spec = (copy['spec'] ?? {}) as { ingress?: unknown[]; egress?: unknown[]; policyTypes?: string[] };
  defaultPorts(spec.ingress);
  defaultPorts(spec.egress);
  if (spec.policyTypes === undefined || spec.policyTypes.length === 0) {
    spec.policyTypes = (spec.egress ?? []).length > 0 ? ['Ingress', 'Egress'] : ['Ingress'];
  }
  return { ...copy, spec: withoutEmptyLists(spec) };
}
