import { labelValueErrors, qualifiedKeyErrors } from '../schemas/object-meta.js';

/*
 * What agent-sandbox's claim controller (v0.5.x, extensions/controllers/sandboxclaim_controller.go,
 * `validateAdditionalPodMetadata`) accepts in a SandboxClaim's `additionalPodMetadata`,
 * transcribed: every key a qualified name; a label key must carry a domain prefix, and that
 * domain (or a parent of it) must be on the controller's allowlist (the file
 * /etc/sandbox-config/allowed-label-domains; `sandbox.users.io` when there is none); an annotation
 * key must not be in a system domain (kubernetes.io, k8s.io, agents.x-k8s.io and their
 * subdomains); label values are valid label values. The real controller reports the first
 * problem as the claim's Ready condition, reason `InvalidMetadata`, and never binds the claim.
 */

/** The controller's allowlist when the operator configured none. */
export const UPSTREAM_DEFAULT_LABEL_DOMAINS: readonly string[] = ['sandbox.users.io'];

const RESTRICTED_DOMAINS = ['kubernetes.io', 'k8s.io', 'agents.x-k8s.io'];
/** The one system annotation a claim may set (the cluster autoscaler's). */
const EXEMPTED_ANNOTATIONS = ['cluster-autoscaler.kubernetes.io/safe-to-evict'];

function within(domain: string, parents: readonly string[]): boolean {
  return parents.some((d) => domain === d || domain.endsWith(`.${d}`));
}

function problemOf(key: string, value: string, isLabel: boolean, allowed: readonly string[]): string | undefined {
  const kind = isLabel ? 'label' : 'annotation';
  const keyErrors = qualifiedKeyErrors(key, 'key');
  if (keyErrors.length > 0) return `invalid ${kind} key: ${JSON.stringify(key)}: ${keyErrors.join('; ')}`;
  const slash = key.indexOf('/');
  const domain = slash >= 0 ? key.slice(0, slash).toLowerCase() : '';
  if (isLabel) {
    if (slash < 0) return `label ${JSON.stringify(key)} must have a domain prefix (e.g. 'sandbox.users.io/my-label') to prevent opting into unintended policy domains`;
    if (!within(domain, allowed)) return `label domain ${JSON.stringify(domain)} is not in the allowlist`;
    const valueErrors = labelValueErrors(value, 'value');
    if (valueErrors.length > 0) return `invalid label value: ${JSON.stringify(value)} does not match allowed pattern: ${valueErrors.join('; ')}`;
    return undefined;
  }
  if (within(domain, RESTRICTED_DOMAINS) && !EXEMPTED_ANNOTATIONS.includes(key)) return `restricted system domain: ${JSON.stringify(key)} is not allowed in AdditionalPodMetadata`;
  return undefined;
}

/** The controller's message for the first key it refuses, or undefined when it accepts them all. */
export function additionalPodMetadataProblem(
  meta: { labels?: Record<string, string>; annotations?: Record<string, string> } | undefined,
  allowedLabelDomains: readonly string[],
): string | undefined {
  for (const [k, v] of Object.entries(meta?.labels ?? {})) {
    const p = problemOf(k, v, true, allowedLabelDomains);
    if (p !== undefined) return `invalid additionalPodMetadata: failed to validate label ${JSON.stringify(k)}: ${p}`;
  }
  for (const [k, v] of Object.entries(meta?.annotations ?? {})) {
    const p = problemOf(k, v, false, allowedLabelDomains);
    if (p !== undefined) return `invalid additionalPodMetadata: failed to validate annotation ${JSON.stringify(k)}: ${p}`;
  }
  return undefined;
}
