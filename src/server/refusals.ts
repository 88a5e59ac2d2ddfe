/** Error codes that mean "refused" (by policy, by the caller's credentials, or by a limit), not "failed". */
const REFUSAL_CODES: ReadonlySet<string> = new Set([
  'unauthorized', 'policy_refused', 'profile_forbidden', 'host_backend_forbidden', 'too_many_calls', 'too_many_bytes', 'too_large', 'tenant_limit',
]);

/** Whether an error code is a refusal (counted in `berth_refusals_total`). */
export function isRefusal(code: string): boolean {
  return REFUSAL_CODES.has(code);
}
