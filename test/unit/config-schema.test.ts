import { describe, expect, it } from 'vitest';
import { exitCodeOf } from '../../src/cli/exit-codes.js';
import { ConfigError } from '../../src/errors.js';
import { parseConfig } from '../../src/setup/parse-config.js';
import { parseVolume } from '../../src/backends/docker/settings.js';
import { settingsFor } from '../../src/config/types.js';

const SRC = '/p/berth.yaml';
/** What a place using backend ssh must name: the host and one way to log in. */
const SSH = { host: 'build1', identityFile: '/keys/berth' };

/** The ConfigError message for `raw`, failing the test if it parses. */
function errorOf(raw: unknown, source: string | null = SRC): string {
  try {
    parseConfig(raw, source ?? undefined);
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigError);
    expect(exitCodeOf((err as ConfigError).code)).toBe(2);
    return (err as ConfigError).message;
  }
  throw new Error(`expected a ConfigError for ${JSON.stringify(raw)}`);
}

/** Each problem ends with "(in <source>)"; the fix inside a problem may itself contain "; ". */
function problemCount(message: string): number {
  return message.split(`(in ${SRC})`).length - 1;
}

describe('defaults', () => {
  const { base, profiles, multiProfile, source } = parseConfig({});

  it.each([
    ['backend', base.backend, 'docker'],
    ['scope', base.scope, 'auto'],
    ['persistent', base.persistent, false],
    ['sharedKey', base.sharedKey, undefined],
    ['userSandbox', base.userSandbox, true],
    ['multiProfile', multiProfile, false],
    ['workspace.mount', base.workspace.mount, false],
    ['exec.timeoutSeconds', base.exec.timeoutSeconds, 180],
    ['exec.maxOutputChars', base.exec.maxOutputChars, 50_000],
    ['lifecycle.idleSeconds', base.lifecycle.idleSeconds, 3600],
    ['env.static', base.env.static, {}],
    ['env.forward', base.env.forward, []],
    ['env.perUserPrefix', base.env.perUserPrefix, 'BERTH_USER'],
    ['env.redact', base.env.redact, true],
    ['docker.image', base.docker.image, 'berth-sandbox:latest'],
    ['docker.network', base.docker.network, 'bridge'],
    ['docker.runAsHostUser', base.docker.runAsHostUser, false],
    ['docker.volumes', base.docker.volumes, []],
    ['profiles', profiles, {}],
    ['source', source, undefined],
  ])('%s defaults correctly', (_key, actual, expected) => {
    expect(actual).toEqual(expected);
  });

  it('leaves docker limits undefined unless written', () => {
    const d = base.docker;
    expect([d.memoryMb, d.cpus, d.pidsLimit, d.shmSizeMb, d.tmpSizeMb, d.ephemeralSizeMb]).toEqual(
      Array(6).fill(undefined),
    );
    const written = parseConfig({
      docker: { memoryMb: 512, cpus: 1.5, pidsLimit: 100, shmSizeMb: 64, tmpSizeMb: 32, ephemeralSizeMb: 256 },
    }).base.docker;
    expect(written).toMatchObject({ memoryMb: 512, cpus: 1.5, pidsLimit: 100, shmSizeMb: 64, tmpSizeMb: 32, ephemeralSizeMb: 256 });
  });

  it('treats null, undefined and {} as an empty config', () => {
    expect(parseConfig(null)).toEqual(parseConfig({}));
    expect(parseConfig(undefined)).toEqual(parseConfig({}));
  });

  it('treats an empty section (`env:` with nothing under it) as empty', () => {
    const c = parseConfig({ env: null, exec: null, profiles: { bot: null } });
    expect(c.base.env.perUserPrefix).toBe('BERTH_USER');
    expect(c.profiles['bot']).toEqual(c.base);
  });

  it('records the source', () => {
    expect(parseConfig({}, SRC).source).toBe(SRC);
  });
});

describe('accepted values', () => {
  it('accepts every backend, scope and network value', () => {
    expect(parseConfig({ backend: 'ssh', ssh: SSH }).base.backend).toBe('ssh');
    expect(parseConfig({ backend: 'local' }).base.backend).toBe('local');
    for (const scope of ['profile', 'user', 'session', 'task'] as const) {
      expect(parseConfig({ scope }).base.scope).toBe(scope);
    }
    expect(parseConfig({ docker: { network: 'none' } }).base.docker.network).toBe('none');
  });

  it('accepts the boundaries of integer ranges', () => {
    const c = parseConfig({ exec: { timeoutSeconds: 86_400, maxOutputChars: 1000 }, lifecycle: { idleSeconds: 10 } });
    expect(c.base.exec).toEqual({ timeoutSeconds: 86_400, maxOutputChars: 1000 });
    expect(c.base.lifecycle.idleSeconds).toBe(10);
    expect(parseConfig({ exec: { timeoutSeconds: 1, maxOutputChars: 10_000_000 } }).base.exec.timeoutSeconds).toBe(1);
  });

  it('accepts env names, PREFIX_* globs and volumes', () => {
    const c = parseConfig({
      env: { static: { _A1: 'x' }, forward: ['GH_TOKEN', 'MYAPP_*'], perUserPrefix: 'BOT_USER', redact: false },
      docker: { volumes: ['/data:/data', '/cache:/root/.cache:ro'] },
    });
    expect(c.base.env).toEqual({ static: { _A1: 'x' }, forward: ['GH_TOKEN', 'MYAPP_*'], perUserPrefix: 'BOT_USER', redact: false });
    expect(c.base.docker.volumes).toEqual([
      { source: '/data', target: '/data', readOnly: false, tenants: ['local'] },
      { source: '/cache', target: '/root/.cache', readOnly: true, tenants: ['local'] },
    ]);
  });

  it('treats sharedKey "" as unset', () => {
    expect(parseConfig({ sharedKey: '' }).base.sharedKey).toBeUndefined();
    // Would be an inert sharedKey on local if "" counted as set.
    expect(parseConfig({ backend: 'local', sharedKey: '' }).base.sharedKey).toBeUndefined();
    // And scope: shared still needs a real key.
    expect(errorOf({ scope: 'shared', sharedKey: '' })).toContain('needs a non-empty sharedKey');
  });

  it('accepts a sharedKey in auto with docker and persistent: true', () => {
    expect(parseConfig({ persistent: true, sharedKey: 'team' }).base.sharedKey).toBe('team');
    expect(parseConfig({ scope: 'shared', sharedKey: 'team', backend: 'local' }).base.sharedKey).toBe('team');
  });

  it('parses volumes', () => {
    expect(parseVolume('/a:/b:ro')).toEqual({ host: '/a', container: '/b', readOnly: true });
    expect(parseVolume('/a:/b')).toEqual({ host: '/a', container: '/b', readOnly: false });
    expect(parseVolume('/a:/b:rw')).toBeUndefined();
  });
});

describe('bad values', () => {
  it.each([
    [{ backend: 'podman' }, 'config key "backend": expected one of "docker", "local", "ssh", "bwrap", "kubernetes", got "podman"'],
    [{ scope: 'global' }, 'config key "scope": expected one of "auto", "shared", "profile", "user", "session", "task", got "global"'],
    [{ persistent: 'yes' }, 'config key "persistent": expected true or false, got "yes"'],
    [{ sharedKey: 5 }, 'config key "sharedKey": expected a string ("" means unset), got 5'],
    [{ userSandbox: 1 }, 'config key "userSandbox": expected true or false, got 1'],
    [{ multiProfile: 'no' }, 'config key "multiProfile": expected true or false, got "no"'],
    [{ workspace: { mount: 'yes' } }, 'config key "workspace.mount": expected true or false'],
    [{ workspace: true }, 'config key "workspace": expected a mapping of keys, got true'],
    [{ exec: { timeoutSeconds: 'abc' } }, 'config key "exec.timeoutSeconds": expected an integer between 1 and 86400, got "abc" (in /p/berth.yaml)'],
    [{ exec: { timeoutSeconds: 0 } }, 'config key "exec.timeoutSeconds": expected an integer between 1 and 86400, got 0'],
    [{ exec: { timeoutSeconds: 86_401 } }, 'config key "exec.timeoutSeconds": expected an integer between 1 and 86400, got 86401'],
    [{ exec: { timeoutSeconds: 1.5 } }, 'got 1.5'],
    [{ exec: { maxOutputChars: 999 } }, 'config key "exec.maxOutputChars": expected an integer between 1000 and 10000000, got 999'],
    [{ exec: { maxOutputChars: 10_000_001 } }, 'config key "exec.maxOutputChars": expected an integer between 1000 and 10000000'],
    [{ lifecycle: { idleSeconds: 9 } }, 'config key "lifecycle.idleSeconds": expected an integer of at least 10, got 9'],
    [{ env: { static: [] } }, 'config key "env.static": expected a mapping of NAME: value, got a list'],
    [{ env: { static: { '1BAD': 'x' } } }, 'config key "env.static.1BAD": "1BAD" is not a valid variable name'],
    [{ env: { static: { 'A-B': 'x' } } }, '"A-B" is not a valid variable name'],
    [{ env: { forward: 'GH_TOKEN' } }, 'config key "env.forward": expected a list of variable names, got "GH_TOKEN"'],
    [{ env: { forward: ['bad-name'] } }, 'config key "env.forward[0]": expected a variable name or a PREFIX_* pattern'],
    [{ env: { forward: ['*'] } }, 'a bare "*" would forward every variable'],
    [{ env: { forward: ['A*B'] } }, 'config key "env.forward[0]"'],
    [{ env: { perUserPrefix: 'berth_user' } }, 'config key "env.perUserPrefix": expected an upper-case prefix ([A-Z][A-Z0-9_]*), got "berth_user"'],
    [{ env: { perUserPrefix: '_X' } }, 'config key "env.perUserPrefix"'],
    [{ env: { redact: 'no' } }, 'config key "env.redact": expected true or false'],
    [{ docker: { image: '' } }, 'config key "docker.image": expected a non-empty image reference'],
    [{ docker: { network: 'host' } }, 'config key "docker.network": expected one of "bridge", "none", got "host"'],
    [{ docker: { memoryMb: 0 } }, 'config key "docker.memoryMb": expected a positive integer, got 0'],
    [{ docker: { memoryMb: 1.5 } }, 'config key "docker.memoryMb": expected a positive integer, got 1.5'],
    [{ docker: { cpus: -1 } }, 'config key "docker.cpus": expected a positive number, got -1'],
    [{ docker: { cpus: Infinity } }, 'config key "docker.cpus": expected a positive number'],
    [{ docker: { pidsLimit: 'many' } }, 'config key "docker.pidsLimit": expected a positive integer'],
    [{ docker: { shmSizeMb: -64 } }, 'config key "docker.shmSizeMb"'],
    [{ docker: { tmpSizeMb: 0 } }, 'config key "docker.tmpSizeMb"'],
    [{ docker: { ephemeralSizeMb: 0 } }, 'config key "docker.ephemeralSizeMb"'],
    [{ docker: { runAsHostUser: 'true' } }, 'config key "docker.runAsHostUser": expected true or false'],
    [{ docker: { volumes: ['/a:/b:rw'] } }, 'config key "docker.volumes[0]": expected a volume'],
    [{ docker: { volumes: ['relative:/b'] } }, 'config key "docker.volumes[0]"'],
    [{ docker: { volumes: ['/a:relative'] } }, 'config key "docker.volumes[0]"'],
    [{ docker: { volumes: ['/a'] } }, 'config key "docker.volumes[0]"'],
    [{ docker: { volumes: ['/a/../etc:/b'] } }, 'config key "docker.volumes[0]"'],
    [{ docker: { volumes: ['/a:/'] } }, 'config key "docker.volumes[0]"'],
    [{ profiles: [] }, 'config key "profiles": expected a mapping of profile names to settings, got a list'],
    [{ profiles: { bot: 'docker' } }, 'config key "profiles.bot": expected a mapping of profile settings, got "docker"'],
    [{ profiles: { 'a b': {} } }, 'config key "profiles.a b": profile name "a b" is not allowed'],
    [{ profiles: { ['x'.repeat(65)]: {} } }, 'is not allowed; use 1-64 characters'],
    [{ profiles: { bot: { exec: { timeoutSeconds: 0 } } } }, 'config key "profiles.bot.exec.timeoutSeconds": expected an integer between 1 and 86400'],
    [[1, 2], 'config: expected a mapping of config keys, got a list'],
    ['backend: local', 'config: expected a mapping of config keys, got "backend: local"'],
  ])('%j is rejected', (raw, expected) => {
    expect(errorOf(raw)).toContain(expected);
  });

  it('accepts profile names of 64 characters and with . _ -', () => {
    const name = `a.b_c-${'x'.repeat(58)}`;
    expect(Object.keys(parseConfig({ profiles: { [name]: {} } }).profiles)).toEqual([name]);
  });

  it('never echoes an env.static value', () => {
    const message = errorOf({ env: { static: { TOKEN: 123456789 } }, profiles: { bot: { env: { static: { T2: true } } } } });
    expect(message).toContain('config key "env.static.TOKEN": expected a string (quote the value), got a number');
    expect(message).toContain('config key "profiles.bot.env.static.T2"');
    expect(message).not.toContain('123456789');
    expect(message).not.toContain('true');
  });

  it('refuses __proto__ keys instead of silently dropping them', () => {
    const raw = JSON.parse('{"env":{"static":{"__proto__":"x"}},"profiles":{"__proto__":{}}}') as unknown;
    const message = errorOf(raw);
    expect(message).toContain('config key "env.static.__proto__" is not allowed');
    expect(message).toContain('config key "profiles.__proto__" is not allowed');
  });

  it('joins several problems with "; " and names the source once per problem', () => {
    const message = errorOf({ backend: 'x', exec: { timeoutSeconds: 0 } });
    expect(problemCount(message)).toBe(2);
    expect(message).toMatch(/^config key "backend": .*\(in \/p\/berth\.yaml\); config key "exec\.timeoutSeconds": .*\(in \/p\/berth\.yaml\)$/);
  });

  it('omits the location without a source', () => {
    expect(errorOf({ backend: 'x' }, null)).toBe('config key "backend": expected one of "docker", "local", "ssh", "bwrap", "kubernetes", got "x"');
  });
});

describe('unknown keys', () => {
  it.each([
    [{ bakend: 'local' }, 'unknown config key "bakend" in /p/berth.yaml; did you mean "backend"?'],
    [{ SharedKey: 'x' }, 'unknown config key "SharedKey" in /p/berth.yaml; did you mean "sharedKey"?'],
    [{ nonsense: 1 }, 'unknown config key "nonsense" in /p/berth.yaml'],
    [{ workspace: { mont: true } }, 'unknown config key "workspace.mont" in /p/berth.yaml; did you mean "mount"?'],
    [{ exec: { timeoutMs: 5 } }, 'unknown config key "exec.timeoutMs"'],
    [{ lifecycle: { idleSecond: 60 } }, 'unknown config key "lifecycle.idleSecond" in /p/berth.yaml; did you mean "idleSeconds"?'],
    [{ env: { forwards: [] } }, 'unknown config key "env.forwards" in /p/berth.yaml; did you mean "forward"?'],
    [{ docker: { memory: 5 } }, 'unknown config key "docker.memory"'],
    [{ profiles: { bot: { sharedkey: 'x' } } }, 'unknown config key "profiles.bot.sharedkey" in /p/berth.yaml; did you mean "sharedKey"?'],
    [{ profiles: { bot: { exec: { timeout: 5 } } } }, 'unknown config key "profiles.bot.exec.timeout"'],
    [{ profiles: { bot: { docker: { imag: 'x' } } } }, 'unknown config key "profiles.bot.docker.imag" in /p/berth.yaml; did you mean "image"?'],
    [{ profiles: { bot: { multiProfile: true } } }, 'config key "profiles.bot.multiProfile" is only allowed at the top level'],
    [{ profiles: { bot: { profiles: {} } } }, 'config key "profiles.bot.profiles" is only allowed at the top level'],
  ])('%j is rejected', (raw, expected) => {
    expect(errorOf(raw)).toContain(expected);
  });

  it('does not suggest something unrelated', () => {
    expect(errorOf({ nonsense: 1 })).not.toContain('did you mean');
  });
});

describe('profiles', () => {
  it('deep-merges a profile over the top level', () => {
    const c = parseConfig({
      backend: 'docker',
      exec: { timeoutSeconds: 60, maxOutputChars: 2000 },
      env: { static: { A: '1', B: '2' }, forward: ['X'], perUserPrefix: 'TOP' },
      docker: { image: 'top:1', memoryMb: 512, volumes: ['/a:/a'] },
      profiles: {
        bot: {
          scope: 'session',
          exec: { timeoutSeconds: 30 },
          env: { static: { B: 'override', C: '3' }, forward: ['Y'] },
          docker: { cpus: 2, volumes: ['/b:/b:ro'] },
        },
      },
    });
    const bot = settingsFor(c, 'bot');
    expect(bot.scope).toBe('session');
    expect(bot.exec).toEqual({ timeoutSeconds: 30, maxOutputChars: 2000 });
    expect(bot.env.static).toEqual({ A: '1', B: 'override', C: '3' }); // merged by key
    expect(bot.env.forward).toEqual(['Y']); // replaced
    expect(bot.env.perUserPrefix).toBe('TOP');
    expect(bot.docker).toMatchObject({ image: 'top:1', memoryMb: 512, cpus: 2, volumes: [{ source: '/b', target: '/b', readOnly: true, tenants: ['local'] }] });
    // The top level is untouched by the profile.
    expect(c.base.scope).toBe('auto');
    expect(c.base.env.static).toEqual({ A: '1', B: '2' });
    expect(c.base.docker.cpus).toBeUndefined();
  });

  it('returns base settings for profiles without a section', () => {
    const c = parseConfig({ backend: 'local', profiles: { bot: { backend: 'ssh', ssh: SSH } } });
    expect(settingsFor(c, 'other').backend).toBe('local');
    expect(settingsFor(c, 'bot').backend).toBe('ssh');
    expect(settingsFor(c, 'constructor').backend).toBe('local');
  });

  it('lets a profile unset an inherited sharedKey with ""', () => {
    const c = parseConfig({ persistent: true, sharedKey: 'team', profiles: { bot: { sharedKey: '', backend: 'local' } } });
    expect(c.base.sharedKey).toBe('team');
    expect(c.profiles['bot']!.sharedKey).toBeUndefined();
  });

  it('keeps multiProfile at the top level', () => {
    expect(parseConfig({ multiProfile: true }).multiProfile).toBe(true);
  });
});

describe('immutability', () => {
  it('deep-freezes the whole config', () => {
    const c = parseConfig({ env: { static: { A: '1' }, forward: ['B'] }, profiles: { bot: { docker: { volumes: ['/a:/a'] } } } });
    const frozen = [
      c,
      c.base,
      c.base.env,
      c.base.env.static,
      c.base.env.forward,
      c.base.exec,
      c.base.workspace,
      c.base.lifecycle,
      c.base.docker,
      c.base.docker.volumes,
      c.profiles,
      c.profiles['bot']!,
      c.profiles['bot']!.docker.volumes,
      c.profiles['bot']!.env.static,
    ];
    for (const object of frozen) expect(Object.isFrozen(object)).toBe(true);
    expect(() => {
      (c.base.env.forward as string[]).push('C');
    }).toThrow(TypeError);
  });

  it('does not share mutable state with the raw input or between parses', () => {
    const raw = { env: { static: { A: '1' }, forward: ['B'] } };
    const c = parseConfig(raw);
    raw.env.static.A = 'changed';
    raw.env.forward.push('C');
    expect(c.base.env.static).toEqual({ A: '1' });
    expect(c.base.env.forward).toEqual(['B']);
    expect(Object.isFrozen(raw.env.forward)).toBe(false);
    expect(Object.isFrozen(parseConfig({}).base.env.forward)).toBe(true);
  });
});

describe('cross-field rules', () => {
  describe('scope: shared requires a sharedKey', () => {
    it('at the top level', () => {
      expect(errorOf({ scope: 'shared' })).toBe(
        'config key "sharedKey": scope "shared" needs a non-empty sharedKey; set sharedKey to a name for the shared sandbox, or choose another scope (in /p/berth.yaml)',
      );
    });
    it('in a profile', () => {
      expect(errorOf({ profiles: { bot: { scope: 'shared' } } })).toContain('config key "profiles.bot.sharedKey": scope "shared" needs a non-empty sharedKey');
    });
    it('in a profile that unsets the inherited key', () => {
      expect(errorOf({ scope: 'shared', sharedKey: 'k', profiles: { bot: { sharedKey: '' } } })).toContain(
        'config key "profiles.bot.sharedKey": scope "shared" needs a non-empty sharedKey',
      );
    });
    it('is satisfied by an inherited key', () => {
      expect(settingsFor(parseConfig({ persistent: true, sharedKey: 'k', profiles: { bot: { scope: 'shared', backend: 'ssh', ssh: SSH } } }), 'bot').sharedKey).toBe('k');
    });
    it('reports a top-level problem once, not again for every profile', () => {
      const message = errorOf({ scope: 'shared', profiles: { a: {}, b: { exec: { timeoutSeconds: 5 } } } });
      expect(problemCount(message)).toBe(1);
    });
  });

  describe('sharedKey in scope auto needs docker with persistent: true', () => {
    it('errors with backend local', () => {
      const message = errorOf({ backend: 'local', sharedKey: 'k' });
      expect(message).toContain('config key "sharedKey": in scope "auto" sharedKey only applies to a persistent container backend');
      expect(message).toContain('backend "local" is not a container backend');
      expect(message).toContain('set scope: shared');
    });
    it('errors with backend ssh', () => {
      expect(errorOf({ backend: 'ssh', sharedKey: 'k' })).toContain('backend "ssh" is not a container backend');
    });
    it('errors with persistent: false', () => {
      expect(errorOf({ persistent: false, sharedKey: 'k' })).toContain('here persistent is false');
    });
    it('errors in a profile that writes the key', () => {
      expect(errorOf({ profiles: { bot: { backend: 'local', sharedKey: 'k' } } })).toContain('config key "profiles.bot.sharedKey": in scope "auto"');
    });
    it('errors for a top-level key inherited by a non-container profile, and says how to unset it', () => {
      const message = errorOf({ persistent: true, sharedKey: 'k', profiles: { bot: { backend: 'ssh', ssh: SSH } } });
      expect(message).toContain('config key "profiles.bot.sharedKey": in scope "auto" sharedKey (set at the top level)');
      expect(message).toContain('set profiles.bot.sharedKey: "" to unset it for this profile');
      expect(problemCount(message)).toBe(1); // the top level itself is fine
    });
  });

  describe('sharedKey with scope profile/user/session/task is inert', () => {
    it.each(['profile', 'user', 'session', 'task'])('scope %s', (scope) => {
      expect(errorOf({ scope, sharedKey: 'k' })).toContain(`config key "sharedKey": scope "${scope}" never uses sharedKey`);
    });
    it('in a profile that changes the scope', () => {
      expect(errorOf({ sharedKey: 'k', profiles: { bot: { scope: 'session' } } })).toContain(
        'config key "profiles.bot.sharedKey": scope "session" never uses sharedKey (set at the top level)',
      );
    });
  });

  describe('userSandbox only applies in scope auto', () => {
    it.each(['shared', 'profile', 'user', 'session', 'task'])('scope %s', (scope) => {
      const raw = { scope, userSandbox: false, ...(scope === 'shared' ? { sharedKey: 'k' } : {}) };
      expect(errorOf(raw)).toContain(`config key "userSandbox": userSandbox only applies in scope "auto" (here scope is "${scope}")`);
    });
    it('also when written as true', () => {
      expect(errorOf({ scope: 'session', userSandbox: true })).toContain('config key "userSandbox"');
    });
    it('in a profile', () => {
      expect(errorOf({ scope: 'session', profiles: { bot: { userSandbox: false } } })).toContain('config key "profiles.bot.userSandbox"');
    });
    it('accepts it in scope auto and a default with any scope', () => {
      expect(parseConfig({ userSandbox: false }).base.userSandbox).toBe(false);
      expect(parseConfig({ scope: 'session' }).base.userSandbox).toBe(true);
    });
    it('accepts a top-level value inherited by a profile with another scope', () => {
      expect(settingsFor(parseConfig({ userSandbox: false, profiles: { bot: { scope: 'session' } } }), 'bot').scope).toBe('session');
    });
  });

  describe('workspace.mount needs a container backend', () => {
    it('errors when nothing uses docker', () => {
      expect(errorOf({ backend: 'local', workspace: { mount: true } })).toContain(
        'config key "workspace.mount": local, ssh and kubernetes never mount, and no profile it applies to uses a container backend; remove workspace.mount or use backend: docker',
      );
    });
    it('errors in a profile whose backend is not docker', () => {
      expect(errorOf({ profiles: { bot: { backend: 'ssh', workspace: { mount: true } } } })).toContain(
        'config key "profiles.bot.workspace.mount": profile "bot" uses backend "ssh", and local, ssh and kubernetes never mount',
      );
    });
    it('accepts a top-level mount when a profile uses docker', () => {
      const c = parseConfig({ backend: 'local', workspace: { mount: true }, profiles: { box: { backend: 'docker' } } });
      expect(c.profiles['box']!.workspace.mount).toBe(true);
    });
    it('accepts mount: false anywhere', () => {
      expect(parseConfig({ backend: 'local', workspace: { mount: false } }).base.workspace.mount).toBe(false);
    });
  });

  describe('a docker section needs backend docker', () => {
    it('errors at the top level when nothing uses docker', () => {
      expect(errorOf({ backend: 'ssh', docker: { image: 'x' } })).toContain('config key "docker": no profile uses backend docker');
    });
    it('errors in a profile whose backend is not docker', () => {
      expect(errorOf({ profiles: { bot: { backend: 'local', docker: { memoryMb: 5 } } } })).toContain(
        'config key "profiles.bot.docker": profile "bot" uses backend "local", so its docker section would have no effect; remove it or set profiles.bot.backend: docker',
      );
    });
    it('accepts a top-level docker section used by one profile', () => {
      const c = parseConfig({ backend: 'local', docker: { image: 'x' }, profiles: { box: { backend: 'docker' } } });
      expect(c.profiles['box']!.docker.image).toBe('x');
    });
  });

  describe('env.static and env.forward must not name the same variable', () => {
    it('at the top level', () => {
      const message = errorOf({ env: { static: { TOKEN: 'literal-value' }, forward: ['TOKEN'] } });
      expect(message).toContain('config key "env.forward": "TOKEN" is also in env.static');
      expect(message).not.toContain('literal-value');
    });
    it('across the top level and a profile', () => {
      expect(errorOf({ env: { static: { A: 'x' } }, profiles: { bot: { env: { forward: ['A'] } } } })).toContain(
        'config key "profiles.bot.env.forward": "A" is also in env.static',
      );
    });
    it('accepts a profile that replaces the forwarded list', () => {
      const c = parseConfig({ env: { forward: ['A'] }, profiles: { bot: { env: { static: { A: 'x' }, forward: [] } } } });
      expect(c.profiles['bot']!.env.static).toEqual({ A: 'x' });
    });
  });
});

describe('installation-wide sections and the trust-boundary settings', () => {
  it('defaults: no host backend for remote callers, per-tenant limits, audit cap and retention', () => {
    const c = parseConfig({});
    expect(c.server).toEqual({
      allowHostBackend: false, metrics: { perTenant: false },
      maxConnections: 4096, maxConnectionsPerAddress: 1024, headerTimeoutSeconds: 10, keepAliveSeconds: 5, bodyStallSeconds: 30,
    });
    expect(c.limits).toEqual({
      concurrentCalls: 16, uploadBytesInFlight: 256 * 1024 * 1024, stagingBytes: 1024 * 1024 * 1024, mcpSessions: 32, sandboxes: 50, memoryMb: undefined, diskMb: undefined,
      snapshots: 100, snapshotBytes: undefined, snapshotRetentionDays: 30,
    });
    expect(c.audit).toEqual({ maxCommandChars: 4096, retentionDays: 30 });
    expect(c.base.workspace.allowedRoots).toEqual([]);
    expect(c.base.files.mediaMode).toBe('copy');
    expect(c.base.docker.diskMb).toBeUndefined();
  });

  it('reads written values', () => {
    const c = parseConfig({
      server: { allowHostBackend: true }, limits: { concurrentCalls: 4 }, audit: { retentionDays: 7 },
      workspace: { allowedRoots: ['/srv/projects'] }, files: { mediaMode: 'live' }, docker: { diskMb: 2048 },
    });
    expect(c.server.allowHostBackend).toBe(true);
    expect(c.limits.concurrentCalls).toBe(4);
    expect(c.limits.stagingBytes).toBe(1024 * 1024 * 1024);
    expect(c.audit).toEqual({ maxCommandChars: 4096, retentionDays: 7 });
    expect(c.base.workspace.allowedRoots).toEqual(['/srv/projects']);
    expect(c.base.files.mediaMode).toBe('live');
    expect(c.base.docker.diskMb).toBe(2048);
  });

  it('limits.sandboxes, memoryMb and diskMb: positive integers when written', () => {
    expect(parseConfig({ limits: { sandboxes: 3, memoryMb: 4096, diskMb: 8192 } }).limits).toMatchObject({ sandboxes: 3, memoryMb: 4096, diskMb: 8192 });
    expect(errorOf({ limits: { sandboxes: 0 } })).toContain('config key "limits.sandboxes": expected an integer between 1 and 1000000, got 0');
    expect(errorOf({ limits: { memoryMb: -1 } })).toContain('config key "limits.memoryMb"');
    expect(errorOf({ limits: { diskMb: 1.5 } })).toContain('config key "limits.diskMb"');
    expect(errorOf({ profiles: { bot: { limits: { sandboxes: 2 } } } })).toContain('limits');
  });

  it('limits.mcpSessions: 32 by default, a positive integer when written', () => {
    expect(parseConfig({ limits: { mcpSessions: 2 } }).limits.mcpSessions).toBe(2);
    expect(errorOf({ limits: { mcpSessions: 0 } })).toContain('config key "limits.mcpSessions": expected an integer between 1 and 100000, got 0');
  });

  it('server.metrics.perTenant: off by default, read when written, unknown keys under it named', () => {
    expect(parseConfig({ server: { metrics: { perTenant: true } } }).server).toMatchObject({ allowHostBackend: false, metrics: { perTenant: true } });
    expect(parseConfig({ server: { metrics: null } }).server.metrics).toEqual({ perTenant: false });
    expect(errorOf({ server: { metrics: { perTennant: true } } })).toContain('unknown config key "server.metrics.perTennant"');
    expect(errorOf({ server: { metrics: { perTenant: 'yes' } } })).toContain('config key "server.metrics.perTenant": expected true or false, got "yes"');
    expect(errorOf({ server: { metricz: {} } })).toMatch(/unknown config key "server.metricz".*did you mean "metrics"\?/);
  });

  it.each([
    ['maxConnections', 4096, 1, 1_000_000],
    ['maxConnectionsPerAddress', 1024, 1, 1_000_000],
    ['headerTimeoutSeconds', 10, 1, 3600],
    ['keepAliveSeconds', 5, 1, 3600],
    ['bodyStallSeconds', 30, 1, 86_400],
  ] as const)('server.%s: %i by default, an integer between %i and %i when written', (key, byDefault, min, max) => {
    expect(parseConfig({}).server[key]).toBe(byDefault);
    const written = key === 'maxConnections' ? { maxConnections: 2000, maxConnectionsPerAddress: 100 } : { [key]: 7 };
    expect(parseConfig({ server: written }).server[key]).toBe(written[key as keyof typeof written]);
    expect(parseConfig({ server: { [key]: max, ...(key === 'maxConnectionsPerAddress' ? { maxConnections: max } : {}) } }).server[key]).toBe(max);
    for (const bad of [min - 1, max + 1, 2.5, '10']) {
      expect(errorOf({ server: { [key]: bad } })).toContain(`config key "server.${key}": expected an integer between ${min} and ${max}, got`);
    }
  });

  it('server.maxConnectionsPerAddress above server.maxConnections is refused: it could never be reached', () => {
    const message = errorOf({ server: { maxConnections: 100, maxConnectionsPerAddress: 200 } });
    expect(message).toBe(
      'config key "server.maxConnectionsPerAddress": 200 is more than server.maxConnections (100), so it would have no effect; ' +
        `lower it, or raise server.maxConnections (in ${SRC})`,
    );
    // Against the default of the other key too.
    expect(errorOf({ server: { maxConnections: 10 } })).toContain('"server.maxConnectionsPerAddress": 1024 is more than server.maxConnections (10)');
    expect(parseConfig({ server: { maxConnections: 100, maxConnectionsPerAddress: 100 } }).server.maxConnectionsPerAddress).toBe(100);
  });

  it('an unknown server key is named, with the closest one', () => {
    expect(errorOf({ server: { maxConnectionPerAddress: 5 } })).toMatch(/unknown config key "server.maxConnectionPerAddress".*did you mean "maxConnectionsPerAddress"\?/);
  });

  it.each([
    ['server', { allowHostBackend: true }],
    ['limits', { concurrentCalls: 2 }],
    ['audit', { retentionDays: 2 }],
  ])('%s is only allowed at the top level', (key, value) => {
    expect(errorOf({ profiles: { bot: { [key]: value } } })).toContain(`config key "profiles.bot.${key}" is only allowed at the top level`);
  });

  it('a volume mapping names its audience; a string volume is for the CLI tenant "local" only', () => {
    const c = parseConfig({
      docker: {
        volumes: [
          '/a:/a',
          { source: '/ref', target: '/ref', readOnly: true, tenants: ['acme', 'beta'] },
          { source: '/pub', target: '/pub', tenants: '*' },
        ],
      },
    });
    expect(c.base.docker.volumes).toEqual([
      { source: '/a', target: '/a', readOnly: false, tenants: ['local'] },
      { source: '/ref', target: '/ref', readOnly: true, tenants: ['acme', 'beta'] },
      { source: '/pub', target: '/pub', readOnly: false, tenants: '*' },
    ]);
  });

  it.each([
    [{ docker: { volumes: [{ source: '/a', target: '/a' }] } }, 'docker.volumes[0]'],
    [{ docker: { volumes: [{ source: '/a', target: '/a', tenants: [] }] } }, 'docker.volumes[0]'],
    [{ docker: { volumes: [{ source: 'rel', target: '/a', tenants: '*' }] } }, 'docker.volumes[0]'],
    [{ docker: { volumes: [{ source: '/a', target: '/', tenants: '*' }] } }, 'docker.volumes[0]'],
    [{ docker: { volumes: [{ source: '/a', target: '/a', tenants: ['no/slash'] }] } }, 'docker.volumes[0]'],
    [{ workspace: { allowedRoots: ['relative'] } }, 'workspace.allowedRoots[0]'],
    [{ files: { mediaMode: 'symlink' } }, 'files.mediaMode'],
    [{ limits: { concurrentCalls: 0 } }, 'limits.concurrentCalls'],
    [{ audit: { maxCommandChars: 10 } }, 'audit.maxCommandChars'],
  ])('refuses %j', (raw, key) => {
    expect(errorOf(raw)).toContain(`config key "${key}`);
  });
});

describe('the ssh section', () => {
  it('defaults every key but the host and the way to log in', () => {
    const s = parseConfig({ backend: 'ssh', ssh: SSH }).base.ssh;
    expect(s).toMatchObject({
      host: 'build1', port: 22, user: 'root', identityFile: '/keys/berth', agent: undefined, trustOnFirstUse: false,
      keepaliveIntervalSeconds: 15, keepaliveCountMax: 3, maxSessions: 10, connectTimeoutSeconds: 20, homeRoot: '/home/berth', maxProcesses: undefined,
      tmpSizeMb: 256,
    });
    expect(s.knownHosts).toMatch(/\/\.ssh\/known_hosts$/);
  });

  it('a place using backend ssh without a host is an error naming the key and the fix', () => {
    expect(errorOf({ backend: 'ssh', ssh: { identityFile: '/k' } })).toContain(
      'config key "ssh.host": backend ssh needs the host to run sandboxes on; set ssh.host to its name or address',
    );
    expect(errorOf({ profiles: { build: { backend: 'ssh', ssh: { agent: '/run/agent.sock' } } } })).toContain(
      'config key "profiles.build.ssh.host": backend ssh needs the host to run sandboxes on; set profiles.build.ssh.host to its name or address',
    );
  });

  it('needs exactly one way to log in: a key file or an agent', () => {
    expect(errorOf({ backend: 'ssh', ssh: { host: 'h' } })).toContain(
      'config key "ssh.identityFile": backend ssh needs a way to log in; set ssh.identityFile to a private key file or ssh.agent to an ssh-agent socket',
    );
    expect(errorOf({ backend: 'ssh', ssh: { host: 'h', identityFile: '/k', agent: '/a.sock' } })).toContain(
      'config key "ssh.agent": ssh.identityFile and ssh.agent are both set, and berth authenticates one way; remove one of them',
    );
  });

  it('a profile that names an agent replaces the inherited key file (one choice, not a contradiction)', () => {
    const c = parseConfig({ backend: 'ssh', ssh: SSH, profiles: { build: { ssh: { agent: '/run/agent.sock' } } } });
    expect(settingsFor(c, 'build').ssh).toMatchObject({ host: 'build1', agent: '/run/agent.sock', identityFile: undefined });
    expect(settingsFor(c, 'other').ssh).toMatchObject({ identityFile: '/keys/berth', agent: undefined });
  });

  it('reports a top-level problem once, not again for profiles that inherit it', () => {
    const message = errorOf({ backend: 'ssh', ssh: { identityFile: '/k' }, profiles: { a: {}, b: { exec: { timeoutSeconds: 5 } } } });
    expect(problemCount(message)).toBe(1);
  });

  it('refuses unknown keys, relative paths, option-looking hosts and bad ranges', () => {
    expect(errorOf({ backend: 'ssh', ssh: { ...SSH, forwardAgent: true } })).toContain('"ssh.forwardAgent"');
    expect(errorOf({ backend: 'ssh', ssh: { ...SSH, identityFile: 'keys/berth' } })).toContain('config key "ssh.identityFile"');
    expect(errorOf({ backend: 'ssh', ssh: { ...SSH, host: '-oProxyCommand=x' } })).toContain('config key "ssh.host"');
    expect(errorOf({ backend: 'ssh', ssh: { ...SSH, port: 70_000 } })).toContain('config key "ssh.port"');
    expect(errorOf({ backend: 'ssh', ssh: { ...SSH, homeRoot: '/' } })).toContain('config key "ssh.homeRoot"');
    expect(errorOf({ backend: 'ssh', ssh: { ...SSH, homeRoot: '/home/../etc' } })).toContain('config key "ssh.homeRoot"');
    expect(errorOf({ backend: 'ssh', ssh: { ...SSH, maxSessions: 0 } })).toContain('config key "ssh.maxSessions"');
    expect(errorOf({ backend: 'ssh', ssh: { ...SSH, tmpSizeMb: 0 } })).toContain('config key "ssh.tmpSizeMb"');
  });

  it('an ssh section no profile uses is an error', () => {
    expect(errorOf({ backend: 'local', ssh: SSH })).toContain('config key "ssh": no profile uses backend ssh');
  });
});

describe('warmPool', () => {
  it('is off by default, and a profile may set its own size', () => {
    const c = parseConfig({ persistent: false, profiles: { chat: { warmPool: { size: 3 } } } });
    expect(c.base.warmPool).toEqual({ size: 0 });
    expect(settingsFor(c, 'chat').warmPool).toEqual({ size: 3 });
  });

  it('refuses unknown keys and sizes out of range', () => {
    expect(errorOf({ persistent: false, warmPool: { count: 2 } })).toMatch(/warmPool\.count/);
    expect(errorOf({ persistent: false, warmPool: { size: 65 } })).toMatch(/warmPool\.size.*between 0 and 64/);
  });

  it('is an error where it would never be used: a persistent or shared profile', () => {
    expect(errorOf({ persistent: true, warmPool: { size: 2 } })).toMatch(/"warmPool\.size": a warm pool serves only ephemeral sandboxes, and persistent is true here/);
    expect(errorOf({ persistent: false, profiles: { s: { scope: 'shared', sharedKey: 'k', warmPool: { size: 1 } } } }))
      .toMatch(/"profiles\.s\.warmPool\.size": scope "shared" has one sandbox that never comes from a warm pool/);
  });
});
