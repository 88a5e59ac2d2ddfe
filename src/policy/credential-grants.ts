import type { CredentialSpec, EgressCredential } from '../egress/credentials.js';
import { placeholderFor } from '../egress/placeholders.js';
import { resolveEnvGrants, type EnvGrantInput, type SecretValues } from './env-grants.js';

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

/**
 * The credentials of a place whose source is set nowhere: not in berth's environment, not in the
 * place's secrets file (globally or for any user), and not as any user's own variable. Each is a
 * start-up error, as a typo in `from` would otherwise show only as a failed request much later.
 *
 * @example
 * unsetCredentialSources({ profile: 'bot', credentials, env }, process.env, secrets) // ['config key "profiles.bot.credentials.GH": ...']
 */
export function unsetCredentialSources(
  place: { profile: string | undefined; credentials: readonly CredentialSpec[]; env: { perUserPrefix: string; secretsFile?: string | undefined } },
  hostEnv: Readonly<Record<string, string | undefined>>,
  secrets: ReadonlyMap<string, SecretValues>,
): string[] {
  const file = place.env.secretsFile === undefined ? undefined : secrets.get(place.env.secretsFile);
  const names = Object.keys(hostEnv).filter((n) => hostEnv[n] !== undefined && hostEnv[n] !== '');
  const userRoot = `${place.env.perUserPrefix}_`;
  const problems: string[] = [];
  for (const c of place.credentials) {
    const set = names.includes(c.from)
      || (file?.global.has(c.from) ?? false)
      || [...(file?.users.values() ?? [])].some((u) => u.has(c.from))
      || names.some((n) => n.startsWith(userRoot) && n.endsWith(`_${c.from}`));
    if (set) continue;
    const at = place.profile === undefined ? `credentials.${c.name}` : `profiles.${place.profile}.credentials.${c.name}`;
    problems.push(
      `config key "${at}": its value "${c.from}" is set nowhere (berth's environment, env.secretsFile, or a user's ${userRoot}<PLATFORM>_<ID>_${c.from}); ` +
        'set it, or fix "from"',
    );
  }
  return problems;
}
