import { UsageError } from '../errors.js';
import {
  DEFAULT_PROFILE,
  DEFAULT_TENANT,
  type AttachedWorkspace,
  type CallScope,
  type CallScopeInput,
  type CallToken,
} from './call-scope.js';
import { reservedTaskReason } from './sandbox-key.js';
import { formatUserRef, parseUserRef } from './user-ref.js';

const NAME_RE = /^[A-Za-z0-9._-]{1,64}$/;
const ID_MAX_CHARS = 256;
/** C0/C1 controls and DEL, plus lone surrogates (no UTF-8 form, so not a stable identifier). */
const ID_FORBIDDEN_RE = /[\p{Cc}\p{Cs}]/u;

/**
 * Fill defaults and validate a call scope. Empty strings mean "not given".
 *
 * @example
 * normalizeScope({ session: 's1' }) // { tenant: 'local', profile: 'default', session: 's1' }
 * @throws UsageError naming the field and the expected form.
 */
export function normalizeScope(input: CallScopeInput): CallScope {
  if (input === null || typeof input !== 'object') {
    throw new UsageError('call scope must be an object like { session: "s1" }');
  }
  const tenant = name('tenant', given(input.tenant)) ?? DEFAULT_TENANT;
  const profile = name('profile', given(input.profile)) ?? DEFAULT_PROFILE;
  const session = identifier('session', given(input.session));
  // `@...` names the stand-in session of calls that carry none (`@default`, `@user:...`,
  // `@task:...`); a caller naming one would close or read another user's session-less state.
  if (session?.startsWith('@')) {
    throw new UsageError(`session "${session}" starts with "@", which berth reserves for calls without a session; pick another session id`);
  }
  const task = identifier('task', given(input.task));
  const parentTask = identifier('parentTask', given(input.parentTask));
  const userRef = given(input.user);
  const user = userRef === undefined ? undefined : formatUserRef(parseUserRef(userRef));
  const workspace = attachedWorkspace(input.workspace);
  const token = callToken(input.token);

  for (const [field, value] of [['task', task], ['parentTask', parentTask]] as const) {
    const reason = value === undefined ? undefined : reservedTaskReason(value);
    if (reason !== undefined) {
      throw new UsageError(`${field} "${value}" ${reason}; pick a task id that is not a sandbox key form`);
    }
  }
  if (parentTask !== undefined && task === undefined) {
    throw new UsageError(`parentTask "${parentTask}" needs a task: pass the subagent's own task id with it`);
  }
  if (parentTask !== undefined && parentTask === task) {
    throw new UsageError(`task "${task}" cannot be its own parentTask`);
  }

  const scope: CallScope = { tenant, profile };
  if (session !== undefined) scope.session = session;
  if (task !== undefined) scope.task = task;
  if (parentTask !== undefined) scope.parentTask = parentTask;
  if (user !== undefined) scope.user = user;
  if (workspace !== undefined) scope.workspace = workspace;
  if (token !== undefined) scope.token = token;
  return Object.freeze(scope);
}

/** A token's id and name, each 1-64 letters, digits, '.', '_' or '-' (what `berth token create` makes). */
function callToken(value: unknown): CallToken | undefined {
  if (value === undefined || value === null) return undefined;
  const t = value as Partial<Record<keyof CallToken, unknown>>;
  const ok = (v: unknown): boolean => typeof v === 'string' && NAME_RE.test(v);
  if (typeof value !== 'object' || !ok(t.id) || (t.name !== undefined && !ok(t.name))) {
    throw new UsageError('call scope token must be { id, name? } of 1-64 letters, digits, \'.\', \'_\' or \'-\' each, e.g. { id: "tok_0123456789ab", name: "ci" }');
  }
  return Object.freeze(t.name === undefined ? { id: t.id as string } : { id: t.id as string, name: t.name as string });
}

/** `''` and `undefined` both mean "not given"; anything else must be a string. */
function given(value: unknown): string | undefined {
  if (value === undefined || value === null || value === '') return undefined;
  if (typeof value !== 'string') throw new UsageError(`call scope fields must be strings, got ${typeof value}`);
  return value;
}

function name(field: 'tenant' | 'profile', value: string | undefined): string | undefined {
  if (value === undefined) return undefined;
  if (!NAME_RE.test(value)) {
    throw new UsageError(
      `${field} ${JSON.stringify(value)} must be 1-64 characters of letters, digits, '.', '_' or '-', e.g. "team-a"`,
    );
  }
  return value;
}

function identifier(field: 'session' | 'task' | 'parentTask', value: string | undefined): string | undefined {
  if (value === undefined) return undefined;
  const chars = [...value].length;
  if (chars > ID_MAX_CHARS) {
    throw new UsageError(`${field} is ${chars} characters long; the limit is ${ID_MAX_CHARS}`);
  }
  if (ID_FORBIDDEN_RE.test(value)) {
    throw new UsageError(`${field} ${JSON.stringify(value)} contains control characters; use printable text`);
  }
  return value;
}

function attachedWorkspace(value: unknown): AttachedWorkspace | undefined {
  if (value === undefined || value === null) return undefined;
  if (typeof value !== 'object') {
    throw new UsageError('workspace must be an object like { path: "/home/ana/project", source: "session" }');
  }
  const { path, source } = value as { path?: unknown; source?: unknown };
  if (path === undefined || path === '') return undefined;
  if (typeof path !== 'string') throw new UsageError('workspace.path must be a string');
  if (ID_FORBIDDEN_RE.test(path)) {
    throw new UsageError(`workspace.path ${JSON.stringify(path)} contains control characters`);
  }
  // docs/design.md §4: an untagged workspace from an API caller is the caller's own attachment.
  if (source === undefined) return Object.freeze({ path, source: 'session' });
  if (source !== 'session' && source !== 'process') {
    throw new UsageError(`workspace.source must be "session" or "process", got ${JSON.stringify(source)}`);
  }
  return Object.freeze({ path, source });
}
