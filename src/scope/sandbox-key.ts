import type { CoreSettings } from '../config/types.js';
import { ConfigError, PolicyRefusedError } from '../errors.js';
import { resolveRoot, type ParentOf } from './aliases.js';
import { DEFAULT_PROFILE, type CallScope } from './call-scope.js';
import { parseUserRef } from './user-ref.js';

export interface SandboxKeyInput {
  scope: CallScope;
  settings: CoreSettings;
  /**
   * The call's backend keys like a container (its `containerKeying` trait; design §3 rows 2, 4, 5
   * and 7): a task of a non-persistent profile follows its root task, a persistent one shares.
   */
  containerKeying: boolean;
  /** One berth process serves several profiles: keys from sessions, tasks and users are qualified. */
  multiProfile: boolean;
  parentOf: ParentOf;
  /** The call's task has an override that sets an isolation key (image or backend; not cwd). */
  taskOverrideIsolates: boolean;
}

export interface SandboxKeyResolution {
  key: string;
  /** `shared`, `profile`, `user`, `session`, `task` (with `:fallback`), or `auto:1`..`auto:7`. */
  rule: string;
  ephemeral: boolean;
  /** `default`, `profile:<name>` and `shared:*`: sandboxes meant to be used by many sessions. */
  shared: boolean;
}

/**
 * The sandbox key of a call (docs/design.md §3). Pure: reads nothing but its arguments.
 *
 * @example
 * resolveSandboxKey({ scope: { tenant: 'local', profile: 'default', session: 's1' },
 *   settings, containerKeying: true, multiProfile: false, parentOf: () => undefined, taskOverrideIsolates: false })
 * // with docker, persistent: false => { key: 'session:s1', rule: 'auto:5', ephemeral: true, shared: false }
 * @throws PolicyRefusedError for `scope: user` without a user; ConfigError for `scope: shared` without a sharedKey.
 */
export function resolveSandboxKey(a: SandboxKeyInput): SandboxKeyResolution {
  const { key, rule } = keyAndRule(a);
  const shared = isSharedKey(key);
  return { key, rule, shared, ephemeral: !a.settings.persistent && !shared };
}

function keyAndRule(a: SandboxKeyInput): { key: string; rule: string } {
  const { scope, settings, multiProfile } = a;
  const q = (x: string): string => qualify(x, scope.profile, multiProfile);
  const rule6 = (): string => (multiProfile ? profileKey(scope.profile) : 'default');
  const root = (task: string): string | undefined => checkedRoot(task, a.parentOf);

  switch (settings.scope) {
    case 'shared':
      if (settings.sharedKey === undefined || settings.sharedKey === '') {
        throw new ConfigError(`scope "shared" needs a sharedKey; set sharedKey: <name> (profile "${scope.profile}")`);
      }
      return { key: `shared:${settings.sharedKey}`, rule: 'shared' };
    case 'profile':
      return { key: profileKey(scope.profile), rule: 'profile' };
    case 'user':
      // A call that names no user must never land where another user's files are.
      if (scope.user === undefined) {
        throw new PolicyRefusedError(
          `scope "user" needs the end user of the call; pass a user (--user platform:id, e.g. telegram:123456789)`,
        );
      }
      return { key: q(userKey(scope.user)), rule: 'user' };
    case 'session':
      if (scope.session === undefined) return { key: rule6(), rule: 'session:fallback' };
      return { key: q(`session:${scope.session}`), rule: 'session' };
    case 'task': {
      if (scope.task === undefined) return { key: rule6(), rule: 'task:fallback' };
      // A task whose override changes the image or backend cannot live in its parent's sandbox.
      const taskRoot = a.taskOverrideIsolates ? checkedTask(scope.task) : root(scope.task);
      if (taskRoot === undefined) return { key: rule6(), rule: 'task:fallback' };
      return { key: q(taskRoot), rule: 'task' };
    }
    case 'auto':
      break;
  }

  const container = a.containerKeying;
  const containerPersistent = container && settings.persistent;
  if (scope.task !== undefined && a.taskOverrideIsolates) return { key: q(checkedTask(scope.task)), rule: 'auto:1' };
  if (scope.task !== undefined && container && !settings.persistent) {
    const taskRoot = root(scope.task);
    // Alias to nothing: the task follows the sandbox a call without a session gets (row 6).
    return { key: taskRoot === undefined ? rule6() : q(taskRoot), rule: 'auto:2' };
  }
  if (scope.user !== undefined && settings.userSandbox) return { key: q(userKey(scope.user)), rule: 'auto:3' };
  if (containerPersistent && settings.sharedKey !== undefined && settings.sharedKey !== '') {
    return { key: `shared:${settings.sharedKey}`, rule: 'auto:4' };
  }
  if (scope.session !== undefined && !containerPersistent) return { key: q(`session:${scope.session}`), rule: 'auto:5' };
  if (scope.session === undefined) return { key: rule6(), rule: 'auto:6' };
  return { key: profileKey(scope.profile), rule: 'auto:7' };
}

/**
 * `Q(x)`: under `multiProfile`, keys derived from a session, task or user carry the profile:
 * `profile:<p>:<x>`, or `default:<x>` for the default profile.
 */
export function qualify(x: string, profile: string, multiProfile: boolean): string {
  if (!multiProfile) return x;
  return profile === DEFAULT_PROFILE ? `default:${x}` : `profile:${profile}:${x}`;
}

/** `default` for the default profile, `profile:<name>` otherwise. */
function profileKey(profile: string): string {
  return profile === DEFAULT_PROFILE ? 'default' : `profile:${profile}`;
}

function userKey(user: string): string {
  const { platform, id } = parseUserRef(user);
  return `user:${platform}:${id}`;
}

/**
 * `default`, `profile:<name>` (profile names contain no `:`) and `shared:*`. A qualified key
 * such as `profile:p:session:s` is not shared.
 */
export function isSharedKey(key: string): boolean {
  return key === 'default' || /^profile:[^:]+$/.test(key) || key.startsWith('shared:');
}

const RESERVED_TASK_PREFIXES = ['default:', 'profile:', 'shared:', 'user:', 'session:'];

/**
 * Task ids become sandbox keys unprefixed (task mode and auto rows 1-2), so a task id that is
 * itself a key form would land in another sandbox: task `user:telegram:1` in that user's
 * sandbox, task `default` in the default one. Returns why a task id is refused, or undefined.
 */
export function reservedTaskReason(task: string): string | undefined {
  if (task === 'default') return 'is the name of the default sandbox';
  const prefix = RESERVED_TASK_PREFIXES.find((p) => task.startsWith(p));
  return prefix === undefined ? undefined : `starts with "${prefix}", which sandbox keys use`;
}

function checkedTask(task: string): string {
  const reason = reservedTaskReason(task);
  if (reason !== undefined) throw new PolicyRefusedError(`task "${task}" ${reason}; pick another task id`);
  return task;
}

function checkedRoot(task: string, parentOf: ParentOf): string | undefined {
  checkedTask(task);
  const { root } = resolveRoot(task, parentOf);
  const reason = root === undefined ? undefined : reservedTaskReason(root);
  if (reason !== undefined) {
    throw new PolicyRefusedError(
      `task "${task}" follows the alias chain to "${root}", which ${reason}; remove that alias`,
    );
  }
  return root;
}
