/*
 * The `rule` label of `berth_egress_requests_total`: a decision's rule names an entry or an
 * address (`allow api.github.com`, `deny cidr:10.0.0.0/8`), which would make a series per host.
 * The label is the rule's kind only, one of this fixed set.
 */

export const EGRESS_RULE_LABELS = [
  'allow', 'deny', 'mode_open', 'mode_none', 'not_allowed', 'always_denied', 'exfiltration', 'host_mismatch', 'fronting',
  'bad_client_hello', 'lookup_failed', 'upstream_failed', 'proxy_auth', 'other',
] as const;

export type EgressRuleLabel = (typeof EGRESS_RULE_LABELS)[number];

const EXACT: Record<string, EgressRuleLabel> = {
  'mode open': 'mode_open', 'mode none': 'mode_none', 'not in egress.allow': 'not_allowed', exfiltration: 'exfiltration',
  'host mismatch': 'host_mismatch', fronting: 'fronting', 'bad client hello': 'bad_client_hello', 'lookup failed': 'lookup_failed',
  'proxy auth': 'proxy_auth',
};
const PREFIXES: [string, EgressRuleLabel][] = [
  ['allow ', 'allow'], ['deny ', 'deny'], ['always denied', 'always_denied'], ['upstream failed', 'upstream_failed'],
];

/**
 * @example
 * egressRuleLabel('allow api.github.com') // 'allow'
 * egressRuleLabel('always denied: link-local') // 'always_denied'
 */
export function egressRuleLabel(rule: string): EgressRuleLabel {
  return EXACT[rule] ?? PREFIXES.find(([p]) => rule.startsWith(p))?.[1] ?? 'other';
}
