/*
 * berth's egress proxy core (docs/egress.md): the policy, the decision, the proxy, the CA and the
 * placeholders. `ca.ts` loads @peculiar/x509 and reflect-metadata: import this module lazily,
 * only when a profile turns egress on.
 */
export { ALWAYS_DENIED, type IpAddress } from './addresses.js';
export { EgressCa, type EgressCaOptions, type Leaf } from './ca.js';
export { parseClientHello, type ClientHelloResult } from './client-hello.js';
export {
  checkCredentials, hostInList, parseCredentials,
  type CredentialSpec, type EgressCredential, type HeaderInjection,
} from './credentials.js';
export { decide, decideAddresses, decideName, type Carry, type EgressDecision, type NameStage, type Via } from './decide.js';
export { checkEgressPolicy, emptyPolicy, parseEgressPolicy, type EgressEntry, type EgressIssue, type EgressMode, type EgressPolicy } from './policy.js';
export { openPlaceholderSecret, placeholderFor, PLACEHOLDER_PREFIX } from './placeholders.js';
export { rewriteHeaders, strayPlaceholder } from './placeholder-swap.js';
export { createEgressProxy, EgressProxy, type EgressProxyOptions } from './proxy.js';
export { caBundle, egressEnv, egressRedactValues, sandboxCredentials, type SandboxCaPaths } from './sandbox-setup.js';
export type { ExtraDenied, Resolver } from './target.js';
export { DEFAULT_LIMITS, type EgressChannel, type EgressEvent, type EgressIdentity, type EgressLimits, type EgressSandbox } from './types.js';
export type { UpstreamTrust } from './upstream-trust.js';
