import { describe, expect, it } from 'vitest';
import { BUILTIN_BACKENDS } from '../../src/backends/registry.js';
import { parseConfig } from '../../src/setup/parse-config.js';
import type { ScopeMode } from '../../src/config/types.js';
import type { ProfileSettings } from '../../src/setup/berth-config.js';
import { ConfigError, PolicyRefusedError } from '../../src/errors.js';
import type { CallScope } from '../../src/scope/call-scope.js';
import { isSharedKey, qualify, resolveSandboxKey, type SandboxKeyInput } from '../../src/scope/sandbox-key.js';

const BASE = parseConfig({ backend: 'docker', persistent: false }).base;

/** Settings from the schema's defaults; overrides bypass its cross-field rules on purpose. */
function settings(over: Partial<ProfileSettings> = {}): ProfileSettings {
  return { ...BASE, ...over };
}

const noAliases = () => undefined;

function key(
  scope: Partial<CallScope>,
  over: Partial<ProfileSettings> = {},
  extra: Partial<Omit<SandboxKeyInput, 'scope' | 'settings'>> = {},
) {
  const s = settings(over);
  return resolveSandboxKey({
    scope: { tenant: 'local', profile: 'default', ...scope },
    settings: s,
    containerKeying: BUILTIN_BACKENDS.traits(s.backend).containerKeying,
    multiProfile: false,
    parentOf: noAliases,
    taskOverrideIsolates: false,
    ...extra,
  });
}

const everything: Partial<CallScope> = { session: 's1', task: 't1', user: 'telegram:42' };

describe('explicit scope modes', () => {
  it('shared: shared:<K> for every call, on any backend', () => {
    for (const backend of ['docker', 'local', 'ssh'] as const) {
      expect(key(everything, { scope: 'shared', sharedKey: 'team', backend })).toEqual({
        key: 'shared:team',
        rule: 'shared',
        ephemeral: false,
        shared: true,
      });
    }
    expect(key({}, { scope: 'shared', sharedKey: 'team' }, { multiProfile: true }).key).toBe('shared:team');
  });

  it('shared without a sharedKey is a config error', () => {
    expect(() => key({}, { scope: 'shared' })).toThrow(ConfigError);
  });

  it('profile: default for the default profile, profile:<name> otherwise', () => {
    expect(key(everything, { scope: 'profile' })).toMatchObject({ key: 'default', rule: 'profile', shared: true });
    expect(key({ ...everything, profile: 'coder' }, { scope: 'profile' })).toMatchObject({
      key: 'profile:coder',
      ephemeral: false,
    });
  });

  it('user: user:<platform>:<id>, qualified under multiProfile', () => {
    expect(key(everything, { scope: 'user' })).toEqual({
      key: 'user:telegram:42',
      rule: 'user',
      ephemeral: true,
      shared: false,
    });
    expect(key({ ...everything, profile: 'p' }, { scope: 'user' }, { multiProfile: true }).key).toBe(
      'profile:p:user:telegram:42',
    );
  });

  it('user without a user refuses the call and says how to pass one', () => {
    expect(() => key({ session: 's1' }, { scope: 'user' })).toThrow(PolicyRefusedError);
    expect(() => key({ session: 's1' }, { scope: 'user' })).toThrow(/--user platform:id/);
  });

  it('session: session:<s>; without a session falls back to rule 6', () => {
    expect(key(everything, { scope: 'session' })).toMatchObject({ key: 'session:s1', rule: 'session', ephemeral: true });
    expect(key({ task: 't1' }, { scope: 'session' })).toMatchObject({ key: 'default', rule: 'session:fallback' });
    expect(key({ profile: 'p' }, { scope: 'session' }, { multiProfile: true })).toMatchObject({
      key: 'profile:p',
      rule: 'session:fallback',
    });
    // Without multiProfile rule 6 is `default` even for a named profile.
    expect(key({ profile: 'p' }, { scope: 'session' }).key).toBe('default');
  });

  it('task: the root task; without a task, or aliased to nothing, falls back to rule 6', () => {
    const parentOf = (c: string) => ({ sub: 'mid', mid: 'root', lost: '' })[c];
    expect(key({ task: 'sub' }, { scope: 'task' }, { parentOf })).toMatchObject({ key: 'root', rule: 'task' });
    expect(key({ task: 'solo' }, { scope: 'task' }).key).toBe('solo');
    expect(key({ session: 's1' }, { scope: 'task' })).toMatchObject({ key: 'default', rule: 'task:fallback' });
    expect(key({ task: 'lost' }, { scope: 'task' }, { parentOf })).toMatchObject({
      key: 'default',
      rule: 'task:fallback',
    });
  });

  it('task: an isolating override keeps the task in its own sandbox', () => {
    const parentOf = (c: string) => ({ sub: 'root' })[c];
    expect(key({ task: 'sub' }, { scope: 'task' }, { parentOf, taskOverrideIsolates: true }).key).toBe('sub');
  });
});

describe('auto rows', () => {
  it('row 1: a task whose override isolates gets Q(task), before anything else', () => {
    const parentOf = (c: string) => ({ t1: 'parent' })[c];
    expect(key(everything, { persistent: true, sharedKey: 'k' }, { parentOf, taskOverrideIsolates: true })).toEqual({
      key: 't1',
      rule: 'auto:1',
      ephemeral: false,
      shared: false,
    });
    expect(key({ task: 't1' }, { backend: 'local' }, { taskOverrideIsolates: true })).toMatchObject({
      key: 't1',
      rule: 'auto:1',
      ephemeral: true,
    });
    // Without a task the flag means nothing.
    expect(key({ session: 's1' }, {}, { taskOverrideIsolates: true }).rule).toBe('auto:5');
  });

  it('row 2: task on a non-persistent container backend gets Q(root(task))', () => {
    const parentOf = (c: string) => ({ t1: 'parent' })[c];
    expect(key(everything, {}, { parentOf })).toEqual({ key: 'parent', rule: 'auto:2', ephemeral: true, shared: false });
    // Not on a persistent container, nor on a host backend.
    expect(key({ task: 't1' }, { persistent: true }).rule).toBe('auto:6');
    expect(key({ task: 't1' }, { backend: 'local' }).rule).toBe('auto:6');
    expect(key({ task: 't1', session: 's1' }, { backend: 'ssh' }).rule).toBe('auto:5');
  });

  it('row 2: a task aliased to nothing gets the default sandbox', () => {
    const parentOf = (c: string) => ({ t1: '' })[c];
    expect(key({ task: 't1', session: 's1' }, {}, { parentOf })).toEqual({
      key: 'default',
      rule: 'auto:2',
      ephemeral: false,
      shared: true,
    });
    expect(key({ task: 't1', profile: 'p' }, {}, { parentOf, multiProfile: true }).key).toBe('profile:p');
  });

  it('row 3: a named user gets Q(user:<platform>:<id>) when userSandbox is on', () => {
    expect(key({ session: 's1', user: 'telegram:42' }, { persistent: true, sharedKey: 'k' })).toEqual({
      key: 'user:telegram:42',
      rule: 'auto:3',
      ephemeral: false,
      shared: false,
    });
    expect(key({ user: 'telegram:42' }, { backend: 'local' })).toMatchObject({ rule: 'auto:3', ephemeral: true });
    expect(key({ session: 's1', user: 'telegram:42' }, { userSandbox: false }).rule).toBe('auto:5');
  });

  it('row 4: container-persistent with a sharedKey gets shared:<K>, never qualified', () => {
    expect(key({ session: 's1' }, { persistent: true, sharedKey: 'k' })).toEqual({
      key: 'shared:k',
      rule: 'auto:4',
      ephemeral: false,
      shared: true,
    });
    expect(key({ profile: 'p' }, { persistent: true, sharedKey: 'k' }, { multiProfile: true }).key).toBe('shared:k');
    expect(key({ session: 's1', user: 'telegram:1' }, { persistent: true, sharedKey: 'k', userSandbox: false }).key).toBe(
      'shared:k',
    );
  });

  it('row 5: a session off container-persistent gets Q(session:<s>)', () => {
    for (const over of [{}, { backend: 'local' as const }, { backend: 'ssh' as const, persistent: true }]) {
      expect(key({ session: 's1' }, over)).toMatchObject({ key: 'session:s1', rule: 'auto:5' });
    }
    expect(key({ session: 's1' }, { backend: 'ssh', persistent: true }).ephemeral).toBe(false);
    expect(key({ session: 's1' }).ephemeral).toBe(true);
  });

  it('row 6: no session gets default, or the profile key under multiProfile', () => {
    expect(key({})).toEqual({ key: 'default', rule: 'auto:6', ephemeral: false, shared: true });
    expect(key({ profile: 'p' }).key).toBe('default');
    expect(key({ profile: 'p' }, {}, { multiProfile: true }).key).toBe('profile:p');
    expect(key({}, {}, { multiProfile: true }).key).toBe('default');
    expect(key({ profile: 'p' }, { persistent: true }, { multiProfile: true }).rule).toBe('auto:6');
  });

  it('row 7: a session on container-persistent gets default or profile:<profile>', () => {
    expect(key({ session: 's1' }, { persistent: true })).toEqual({
      key: 'default',
      rule: 'auto:7',
      ephemeral: false,
      shared: true,
    });
    expect(key({ session: 's1', profile: 'p' }, { persistent: true }).key).toBe('profile:p');
  });
});

describe('Q qualification', () => {
  it('qualifies by the profile only under multiProfile', () => {
    expect(qualify('session:s', 'p', true)).toBe('profile:p:session:s');
    expect(qualify('session:s', 'default', true)).toBe('default:session:s');
    expect(qualify('session:s', 'p', false)).toBe('session:s');
  });

  it('one raw session id under two profiles gives two keys under multiProfile', () => {
    const a = key({ session: 's1', profile: 'a' }, {}, { multiProfile: true });
    const b = key({ session: 's1', profile: 'b' }, {}, { multiProfile: true });
    const d = key({ session: 's1' }, {}, { multiProfile: true });
    expect(new Set([a.key, b.key, d.key]).size).toBe(3);
    expect([a.key, d.key]).toEqual(['profile:a:session:s1', 'default:session:s1']);
  });

  it.each<[string, Partial<CallScope>, Partial<ProfileSettings>, Partial<SandboxKeyInput>]>([
    ['auto:1', { task: 't' }, {}, { taskOverrideIsolates: true }],
    ['auto:2', { task: 't' }, {}, {}],
    ['auto:3', { user: 'telegram:1' }, {}, {}],
    ['auto:5', { session: 's' }, {}, {}],
    ['task', { task: 't' }, { scope: 'task' }, {}],
  ])('qualifies the %s key', (rule, scope, over, extra) => {
    const r = key({ ...scope, profile: 'p' }, over, { ...extra, multiProfile: true });
    expect(r.rule).toBe(rule);
    expect(r.key.startsWith('profile:p:')).toBe(true);
    expect(r.shared).toBe(false);
  });
});

describe('ephemeral or persistent', () => {
  const modes: ScopeMode[] = ['profile', 'session', 'task', 'auto'];
  it('persistent: true makes every sandbox persistent', () => {
    for (const scope of modes) {
      expect(key(everything, { scope, persistent: true }).ephemeral).toBe(false);
    }
    expect(key(everything, { scope: 'user', persistent: true }).ephemeral).toBe(false);
  });

  it('persistent: false makes session, task and user keys ephemeral; shared keys stay persistent', () => {
    expect(key({ session: 's' }, { scope: 'session' }).ephemeral).toBe(true);
    expect(key({ task: 't' }, { scope: 'task' }).ephemeral).toBe(true);
    expect(key({ user: 'telegram:1' }, { scope: 'user' }).ephemeral).toBe(true);
    expect(key({}, { scope: 'session' }).ephemeral).toBe(false);
    expect(key({ profile: 'p' }, { scope: 'profile' }).ephemeral).toBe(false);
    expect(key({}, { scope: 'shared', sharedKey: 'k' }).ephemeral).toBe(false);
  });

  it('isSharedKey tells the profile key from a qualified key', () => {
    expect(isSharedKey('default')).toBe(true);
    expect(isSharedKey('profile:p')).toBe(true);
    expect(isSharedKey('shared:k')).toBe(true);
    expect(isSharedKey('profile:p:session:s')).toBe(false);
    expect(isSharedKey('default:session:s')).toBe(false);
    expect(isSharedKey('session:default')).toBe(false);
  });
});

describe('task ids that look like keys', () => {
  it('refuses a task whose alias root is a key form instead of landing in that sandbox', () => {
    const parentOf = (c: string) => ({ t1: 'user:telegram:42' })[c];
    expect(() => key({ task: 't1' }, {}, { parentOf })).toThrow(PolicyRefusedError);
    expect(() => key({ task: 'default' }, { scope: 'task' })).toThrow(PolicyRefusedError);
    expect(() => key({ task: 'shared:k' }, {}, { taskOverrideIsolates: true })).toThrow(PolicyRefusedError);
  });
});
