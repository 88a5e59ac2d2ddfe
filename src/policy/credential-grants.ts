import type { CredentialSpec, EgressCredential } from '../egress/credentials.js';
import { placeholderFor } from '../egress/placeholders.js';
import { resolveEnvGrants, type EnvGrantInput } from './env-grants.js';

/*
 * A sandbox's secretless credentials (docs/design.md §7): where each `credentials:` entry's value
 * comes from is read like an exact `env.forward` name (berth's environment, the secrets file, the
 * call's user's own values, a user's beating a global one), but the value goes to the egress proxy
 * only; the sandbox's environment holds the placeholder.
 */

export interface CredentialGrants {
  /** What the proxy holds for this sandbox: value, placeholder and hosts of each credential that has a value. */
  credentials: EgressCredential[];
  /** The sandbox's variables: each credential's name -> its placeholder. */
  env: Record<string, string>;
  /** Credential names with no value anywhere for this call, sorted. */
  missing: string[];
  /** Credential names whose value is the user's own, left out of a sandbox other users reach, sorted. */
  withheld: string[];
}

/**
 * Resolves `specs` for one sandbox: values by `from` (as `resolveEnvGrants` reads an exact forward
 * name), placeholders from the installation's secret and the sandbox's identity digest.
 *
 * @example
 * resolveCredentialGrants([{ name: 'GITHUB_TOKEN', from: 'GH', hosts: ['api.github.com'] }],
 *   { ...grantInput, hostEnv: { GH: 'ghp_x' } }, secret, digest)
 * // { credentials: [{ name: 'GITHUB_TOKEN', value: 'ghp_x', placeholder: 'berth-ph-..', ... }], env: { GITHUB_TOKEN: 'berth-ph-..' }, missing: [], withheld: [] }
 */
export function resolveCredentialGrants(
  specs: readonly CredentialSpec[], input: EnvGrantInput, secret: Buffer, sandboxDigest: string,
): CredentialGrants {
  if (specs.length === 0) return { credentials: [], env: {}, missing: [], withheld: [] };
  const froms = [...new Set(specs.map((s) => s.from))];
  const values = resolveEnvGrants({
    ...input, env: { static: {}, forward: froms, perUserPrefix: input.env.perUserPrefix, redact: false },
  });
  const credentials: EgressCredential[] = [];
  const env: Record<string, string> = {};
  const missing: string[] = [];
  const withheld: string[] = [];
  for (const s of specs) {
    const value = values.env[s.from];
    if (value === undefined || value === '') {
      (values.withheld.includes(s.from) ? withheld : missing).push(s.name);
      continue;
    }
    const placeholder = placeholderFor(secret, sandboxDigest, s.name);
    credentials.push({ name: s.name, value, placeholder, hosts: s.hosts, ...(s.inject === undefined ? {} : { inject: s.inject }) });
    env[s.name] = placeholder;
  }
  return { credentials, env, missing: missing.sort(), withheld: withheld.sort() };
}
