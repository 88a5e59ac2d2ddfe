import type { EnvSettings } from '../config/types.js';
import { ConfigError } from '../errors.js';
import { parseUserRef } from '../scope/user-ref.js';

/** The values of a secrets file (`SecretsFile`, secrets-file.ts) that grants read. */
export interface SecretValues {
  /** Values before the first section: merged under berth's environment. */
  global: ReadonlyMap<string, string>;
  /** Per-user sections, keyed by `secretsUserKey(tenant, user)`. */
  users: ReadonlyMap<string, ReadonlyMap<string, string>>;
}

export interface EnvGrantInput {
  env: EnvSettings;
  /**
   * The call's tenant. A user's values belong to (tenant, platform, id): another tenant naming the
   * same platform id gets none of them (docs/design.md §7).
   */
  tenant: string;
  /** The call's end user, `platform:id`, or undefined. */
  user: string | undefined;
  /** berth's own environment, read once at start-up. */
  hostEnv: Readonly<Record<string, string | undefined>>;
  /**
   * The profile's `env.secretsFile`, parsed at start-up: globals sit under `hostEnv`, user sections
   * (keyed by `secretsUserKey(tenant, user)`) under per-user variables.
   */
  secrets?: SecretValues | undefined;
  /**
   * Whether the user's own values may go into this sandbox (default true). False for a sandbox
   * other users can reach: they are then left out and named in `withheld`.
   */
  deliverUserValues?: boolean | undefined;
}

export interface EnvGrants {
  /** Everything granted to the sandbox, name -> value. */
  env: Record<string, string>;
  /** Granted names, sorted. */
  names: string[];
  /** Exact `env.forward` names that are not set in berth's environment, sorted. */
  missing: string[];
  /** The user's own names left out because `deliverUserValues` was false (and no global value stands in), sorted. */
  withheld: string[];
  /** Names whose values came from berth's environment (forwarded or per-user), sorted. */
  secretNames: string[];
  /** Values to redact from output (secret values of 8+ characters, when `env.redact`), longest first. */
  redactValues: string[];
}

const REDACT_MIN_CHARS = 8;
const PER_USER_NAME_RE = /^[A-Za-z][A-Za-z0-9_]*$/;

/**
 * What a sandbox's environment contains (docs/design.md §7). Precedence, lowest first:
 * `env.forward` globs, `env.static`, exact `env.forward` names, per-user values. So a user's
 * value beats any global one of the same name, and an explicit name beats a pattern.
 *
 * @example
 * resolveEnvGrants({ env: { static: {}, forward: ['GH_TOKEN'], perUserPrefix: 'BERTH_USER', redact: true },
 *   user: 'telegram:123456789',
 *   hostEnv: { GH_TOKEN: 'global-token', BERTH_USER_TELEGRAM_123456789_GH_TOKEN: 'ana-token' } })
 * // env: { GH_TOKEN: 'ana-token' }, secretNames: ['GH_TOKEN'], redactValues: ['ana-token']
 * @throws ConfigError for a forward entry that is not a name or `PREFIX_*`, or names a per-user variable.
 */
export function resolveEnvGrants(a: EnvGrantInput): EnvGrants {
  const { env } = a;
  // The secrets file's global values read like berth's environment, which wins for one name.
  const hostEnv: Readonly<Record<string, string | undefined>> = a.secrets === undefined || a.secrets.global.size === 0
    ? a.hostEnv
    : { ...Object.fromEntries(a.secrets.global), ...a.hostEnv };
  const perUserRoot = `${env.perUserPrefix}_`;
  const granted = new Map<string, { value: string; secret: boolean }>();
  const missing = new Set<string>();
  const entries = env.forward.map(parseForwardEntry);
  const hostNames = Object.keys(hostEnv);

  for (const entry of entries) {
    if (entry.kind !== 'glob') continue;
    for (const name of hostNames) {
      const value = hostEnv[name];
      // A pattern is never a grant of a credential, nor of any user's private values.
      if (value === undefined || !name.startsWith(entry.prefix)) continue;
      if (isProviderCredential(name) || name.startsWith(perUserRoot)) continue;
      granted.set(name, { value, secret: true });
    }
  }
  for (const [name, value] of Object.entries(env.static)) granted.set(name, { value, secret: false });
  for (const entry of entries) {
    if (entry.kind !== 'exact') continue;
    if (entry.name.startsWith(perUserRoot)) {
      throw new ConfigError(
        `env.forward names "${entry.name}", a per-user variable (prefix ${perUserRoot}); per-user values ` +
          'reach only their own user, so remove it from env.forward',
      );
    }
    const value = hostEnv[entry.name];
    if (value === undefined) missing.add(entry.name);
    else granted.set(entry.name, { value, secret: true });
  }
  const userGrants = new Map<string, string>();
  if (a.user !== undefined) {
    // The user's section of the secrets file first, so a per-user variable overrides it.
    for (const [name, value] of a.secrets?.users.get(secretsUserKey(a.tenant, a.user)) ?? []) {
      if (PER_USER_NAME_RE.test(name)) userGrants.set(name, value);
    }
    // Least specific first: the bare form (tenant `local` only), then the form naming the tenant.
    for (const prefix of userEnvPrefixes(env.perUserPrefix, a.tenant, a.user)) {
      for (const name of hostNames) {
        const value = hostEnv[name];
        if (value === undefined || !name.startsWith(prefix)) continue;
        const bare = name.slice(prefix.length);
        if (PER_USER_NAME_RE.test(bare)) userGrants.set(bare, value);
      }
    }
  }
  const withheld: string[] = [];
  for (const [name, value] of userGrants) {
    if (a.deliverUserValues ?? true) granted.set(name, { value, secret: true });
    else if (!granted.has(name)) withheld.push(name);
  }

  const names = [...granted.keys()].sort();
  const secretNames = names.filter((n) => granted.get(n)!.secret);
  const redact = env.redact
    ? [...new Set(secretNames.map((n) => granted.get(n)!.value))].filter((v) => v.length >= REDACT_MIN_CHARS)
    : [];
  redact.sort((x, y) => y.length - x.length || (x < y ? -1 : x > y ? 1 : 0));
  return {
    env: Object.fromEntries(names.map((n) => [n, granted.get(n)!.value])),
    names,
    missing: [...missing].sort(),
    withheld: withheld.sort(),
    secretNames,
    redactValues: redact,
  };
}

export type ForwardEntry = { kind: 'exact'; name: string } | { kind: 'glob'; prefix: string };

/**
 * An `env.forward` entry: an exact name, or `PREFIX*` (one trailing `*`, non-empty prefix).
 *
 * @example
 * parseForwardEntry('LIBRARY_*') // { kind: 'glob', prefix: 'LIBRARY_' }
 */
export function parseForwardEntry(entry: string): ForwardEntry {
  const star = entry.indexOf('*');
  if (star < 0) {
    if (entry === '') throw new ConfigError('env.forward has an empty entry; remove it');
    return { kind: 'exact', name: entry };
  }
  if (star !== entry.length - 1 || star === 0) {
    throw new ConfigError(
      `env.forward entry "${entry}" is not a name or a prefix pattern; use an exact name or PREFIX_* (one trailing *)`,
    );
  }
  return { kind: 'glob', prefix: entry.slice(0, -1) };
}

/**
 * The tenant whose users the bare variable form (`<prefix>_<PLATFORM>_<id>_<NAME>`) and bare
 * secrets-file sections (`[platform:id]`) belong to: the CLI's default tenant, so a single-tenant
 * installation keeps the reference agent's naming.
 */
export const SINGLE_TENANT = 'local';

/**
 * The variable prefixes that carry one user's values, least specific first: for tenant `local`
 * the bare form and then the tenant form; for any other tenant only the tenant form.
 *
 * @example
 * userEnvPrefixes('BERTH_USER', 'acme', 'telegram:111') // ['BERTH_USER__acme_TELEGRAM_111_']
 */
export function userEnvPrefixes(perUserPrefix: string, tenant: string, user: string): string[] {
  const own = tenantUserEnvPrefix(perUserPrefix, tenant, user);
  return tenant === SINGLE_TENANT ? [userEnvPrefix(perUserPrefix, user), own] : [own];
}

/**
 * The variable prefix of one tenant's user: `<prefix>__<encoded tenant>_<PLATFORM>_<encoded id>_`.
 * The bare form always has a letter or digit (the platform) after `<prefix>_`; this one has a
 * second `_`, so the two forms never overlap. The tenant is encoded like an id (`__XX` escapes for
 * anything but ASCII letters and digits), so after it a single `_` followed by the platform's
 * first character (never `_`) is the only way to read the boundary: no tenant's prefix matches
 * another tenant's variables.
 *
 * @example
 * tenantUserEnvPrefix('BERTH_USER', 'acme', 'telegram:111')   // 'BERTH_USER__acme_TELEGRAM_111_'
 * tenantUserEnvPrefix('BERTH_USER', 'team-a', 'telegram:111') // 'BERTH_USER__team__2Da_TELEGRAM_111_'
 */
export function tenantUserEnvPrefix(perUserPrefix: string, tenant: string, user: string): string {
  const { platform, id } = parseUserRef(user);
  return `${perUserPrefix}__${encodeUserId(tenant)}_${platform.toUpperCase()}_${encodeUserId(id)}_`;
}

/**
 * The key of a user's section in a parsed secrets file: `<tenant>/<platform>:<id>`.
 *
 * @example
 * secretsUserKey('local', 'telegram:1') // 'local/telegram:1'
 */
export function secretsUserKey(tenant: string, user: string): string {
  return `${tenant}/${user}`;
}

/**
 * The bare variable prefix of a user of tenant `local`: `<prefix>_<PLATFORM>_<encoded id>_`.
 *
 * @example
 * userEnvPrefix('BERTH_USER', 'telegram:123456789')   // 'BERTH_USER_TELEGRAM_123456789_'
 * userEnvPrefix('BERTH_USER', 'whatsapp:+15551234567') // 'BERTH_USER_WHATSAPP___2B15551234567_'
 */
export function userEnvPrefix(perUserPrefix: string, user: string): string {
  const { platform, id } = parseUserRef(user);
  return `${perUserPrefix}_${platform.toUpperCase()}_${encodeUserId(id)}_`;
}

/**
 * ASCII letters and digits as they are; every other byte of the UTF-8 id as `__XX` (upper
 * hex). Read left to right, an encoded id splits one way only: a letter or digit is one byte,
 * a `_` always opens a four-character escape `__XX`. So after the end of an id, the separator
 * `_` followed by a letter (the variable name) cannot continue a longer id, since an escape
 * needs `__`: no user's prefix matches another user's variables.
 */
export function encodeUserId(id: string): string {
  let out = '';
  for (const byte of Buffer.from(id, 'utf8')) {
    const alnum = (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x5a) || (byte >= 0x61 && byte <= 0x7a);
    out += alnum ? String.fromCharCode(byte) : `__${byte.toString(16).toUpperCase().padStart(2, '0')}`;
  }
  return out;
}

/** Inverse of `encodeUserId`, strict: undefined for anything it would not produce. */
export function decodeUserId(encoded: string): string | undefined {
  const bytes: number[] = [];
  for (let i = 0; i < encoded.length; ) {
    if (encoded[i] === '_') {
      const escape = /^__([0-9A-F]{2})/.exec(encoded.slice(i));
      if (escape === null) return undefined;
      const byte = parseInt(escape[1]!, 16);
      const alnum = (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x5a) || (byte >= 0x61 && byte <= 0x7a);
      if (alnum) return undefined;
      bytes.push(byte);
      i += 4;
    } else if (/[A-Za-z0-9]/.test(encoded[i]!)) {
      bytes.push(encoded.charCodeAt(i));
      i += 1;
    } else {
      return undefined;
    }
  }
  const decoded = new TextDecoder('utf-8', { fatal: true });
  try {
    return decoded.decode(Uint8Array.from(bytes));
  } catch {
    return undefined;
  }
}

/**
 * Prefixes of provider, platform and cloud credentials. A forward pattern never matches
 * these; only an exact `env.forward` name (or a per-user value) grants them.
 */
const CREDENTIAL_PREFIXES = [
  'OPENAI_', 'ANTHROPIC_', 'CLAUDE_', 'AWS_', 'AZURE_', 'GOOGLE_', 'GCP_', 'GCLOUD_', 'GEMINI_',
  'VERTEX_', 'MISTRAL_', 'COHERE_', 'GROQ_', 'OPENROUTER_', 'HF_', 'HUGGINGFACE_', 'HUGGING_FACE_',
  'XAI_', 'DEEPSEEK_', 'TOGETHER_', 'REPLICATE_', 'PERPLEXITY_', 'FIREWORKS_', 'VOYAGE_', 'OLLAMA_',
  'GH_', 'GITHUB_', 'GITLAB_', 'BITBUCKET_', 'TELEGRAM_', 'SLACK_', 'DISCORD_', 'WHATSAPP_',
  'TWILIO_', 'MATRIX_', 'SIGNAL_', 'STRIPE_', 'NPM_', 'PYPI_', 'DOCKER_', 'SSH_', 'GPG_', 'VAULT_',
  'KUBE', 'DIGITALOCEAN_', 'CLOUDFLARE_', 'CF_', 'HEROKU_', 'VERCEL_', 'NETLIFY_', 'SUPABASE_',
];
/** Anywhere in the name. */
const CREDENTIAL_PARTS = [
  'TOKEN', 'SECRET', 'PASSWORD', 'PASSWD', 'APIKEY', 'API_KEY', 'CREDENTIAL', 'PRIVATE_KEY',
  'PRIVATEKEY', 'ACCESS_KEY', 'ACCESSKEY', 'ASKPASS', 'NETRC',
];
/** As a whole `_`-separated word. */
const CREDENTIAL_WORDS = new Set([
  'KEY', 'PASS', 'PAT', 'DSN', 'JWT', 'COOKIE', 'COOKIES', 'BEARER', 'CREDS', 'AUTH', 'OAUTH',
  'AUTHORIZATION', 'SIGNING', 'WEBHOOK',
]);

/**
 * Looks like a provider, bot or cloud credential (`*_API_KEY`, `*_TOKEN`, `*BOT_TOKEN`,
 * `*_SECRET*`, `OPENAI_*`, `ANTHROPIC_*`, `AWS_*`, `GH_TOKEN`, ...). Deliberately broad: it
 * only keeps patterns from matching, and an exact name can still grant anything.
 */
export function isProviderCredential(name: string): boolean {
  const upper = name.toUpperCase();
  if (CREDENTIAL_PREFIXES.some((p) => upper.startsWith(p))) return true;
  if (CREDENTIAL_PARTS.some((p) => upper.includes(p))) return true;
  return upper.split('_').some((word) => CREDENTIAL_WORDS.has(word));
}
