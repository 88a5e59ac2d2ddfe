import { createHash, randomBytes } from 'node:crypto';
import { DEFAULT_PROFILE, DEFAULT_TENANT, type CallScope } from './call-scope.js';

/** (installation, tenant, profile, key); `profile` is undefined for `shared:*` keys. */
export interface SandboxIdentity {
  installation: string;
  tenant: string;
  profile: string | undefined;
  key: string;
}

/**
 * The identity of the sandbox a key names. `shared:*` keys are shared across the tenant's
 * profiles, so their identity carries no profile.
 *
 * @example
 * sandboxIdentity('inst1', 'local', 'default', 'session:s1')
 * // { installation: 'inst1', tenant: 'local', profile: 'default', key: 'session:s1' }
 */
export function sandboxIdentity(installation: string, tenant: string, profile: string, key: string): SandboxIdentity {
  return Object.freeze({
    installation,
    tenant,
    profile: key.startsWith('shared:') ? undefined : profile,
    key,
  });
}

/** Hex sha256 of the identity, encoded as a JSON array (unambiguous: every field is quoted). */
export function identityDigest(id: SandboxIdentity): string {
  return sha256(JSON.stringify([id.installation, id.tenant, id.profile ?? null, id.key]));
}

const DIGEST_CHARS_IN_DIR = 12;
const VERBATIM_MAX = 100;
const STEM_MAX = 100;
/**
 * Keys kept verbatim as directory names. Stricter than `[A-Za-z0-9._-]` on two points, both
 * to keep "two identities never share a directory": lowercase only, because macOS and Windows
 * file systems fold case (task `A` must not open task `a`'s files), and a letter or digit first,
 * so no name is hidden (`.x`) or reads as an option (`-rf`).
 */
const VERBATIM_RE = /^[a-z0-9][a-z0-9._-]*$/;
/** The shape of a hashed name; a key of this shape is hashed too so it cannot take another's name. */
const HASHED_FORM_RE = /-[0-9a-f]{12}$/;

/**
 * Directory name under `$BERTH_HOME/sandboxes/<backend>/`: the key itself when it is safe and
 * the tenant and profile are the defaults, else `<cleaned stem>-<12 hex of the digest>`.
 * Never contains `:`, `/` or `\`, never `.`/`..`/empty, at most 113 characters.
 *
 * @example
 * sandboxDirName(sandboxIdentity('i', 'local', 'default', 'build'))      // 'build'
 * sandboxDirName(sandboxIdentity('i', 'local', 'default', 'session:s1')) // 'session_s1-' + 12 hex digits of the digest
 */
export function sandboxDirName(id: SandboxIdentity): string {
  const defaults = id.tenant === DEFAULT_TENANT && (id.profile === DEFAULT_PROFILE || id.profile === undefined);
  if (defaults && isVerbatimSafe(id.key)) return id.key;
  return `${cleanStem(id.key, STEM_MAX, 'sandbox')}-${identityDigest(id).slice(0, DIGEST_CHARS_IN_DIR)}`;
}

function isVerbatimSafe(key: string): boolean {
  return key.length <= VERBATIM_MAX && VERBATIM_RE.test(key) && !HASHED_FORM_RE.test(key);
}

const DOCKER_NAME_MAX = 63;
const PERSISTENT_DIGEST_CHARS = 24;
const EPHEMERAL_DIGEST_CHARS = 12;

/**
 * Container name. Persistent: `berth-<24 hex of the digest>`, the same in every process of the
 * installation (create-or-adopt). Ephemeral: `berth-<12 hex>-<unique>`, new per creation; the
 * second `-` keeps the two forms apart. At most 63 characters, so it also works as a hostname.
 */
export function containerName(id: SandboxIdentity, ephemeral: boolean, unique?: string): string {
  const digest = identityDigest(id);
  if (!ephemeral) return `berth-${digest.slice(0, PERSISTENT_DIGEST_CHARS)}`;
  const head = `berth-${digest.slice(0, EPHEMERAL_DIGEST_CHARS)}-`;
  const cleaned = (unique ?? '').replace(/[^a-zA-Z0-9_.-]/g, '').slice(0, DOCKER_NAME_MAX - head.length);
  return head + (cleaned === '' ? randomBytes(8).toString('hex') : cleaned);
}

export interface ShellIdentity {
  /** `task:<t>`, `session:<s>` or `default`. */
  id: string;
  /** Hex sha256 over tenant, profile, user and id. */
  digest: string;
  /** Safe file name stem, unique per shell identity. */
  fileStem: string;
}

/**
 * Who owns a shell and its cwd record (docs/design.md §4): the task when it is a registered
 * subagent, else the session, else the task, else `default`, always within the call's tenant,
 * profile and user.
 *
 * @example
 * shellIdentity({ tenant: 'local', profile: 'default', session: 's1' }, false).id // 'session:s1'
 */
export function shellIdentity(scope: CallScope, isRegisteredSubagent: boolean): ShellIdentity {
  let id: string;
  if (scope.task !== undefined && isRegisteredSubagent) id = `task:${scope.task}`;
  else if (scope.session !== undefined) id = `session:${scope.session}`;
  else if (scope.task !== undefined) id = `task:${scope.task}`;
  else id = 'default';
  const digest = sha256(JSON.stringify(['shell', scope.tenant, scope.profile, scope.user ?? null, id]));
  return { id, digest, fileStem: `${cleanStem(id, 48, 'shell')}-${digest.slice(0, 16)}` };
}

/** Lowercase, runs of anything outside `[a-z0-9._-]` become `_`, no leading `.`/`-`/`_`. */
function cleanStem(text: string, max: number, fallback: string): string {
  const stem = text
    .toLowerCase()
    .replace(/[^a-z0-9._-]+/g, '_')
    .replace(/^[._-]+/, '')
    .slice(0, max);
  return stem === '' ? fallback : stem;
}

function sha256(text: string): string {
  return createHash('sha256').update(text, 'utf8').digest('hex');
}
