import { describe, expect, it } from 'vitest';
import type { EnvSettings } from '../../src/config/types.js';
import { ConfigError } from '../../src/errors.js';
import {
  decodeUserId,
  encodeUserId,
  isProviderCredential,
  parseForwardEntry,
  resolveEnvGrants,
  tenantUserEnvPrefix,
  userEnvPrefix,
  userEnvPrefixes,
} from '../../src/policy/env-grants.js';

function env(over: Partial<EnvSettings> = {}): EnvSettings {
  return { static: {}, forward: [], perUserPrefix: 'BERTH_USER', redact: true, ...over };
}

const grant = (
  settings: Partial<EnvSettings>,
  hostEnv: Record<string, string | undefined>,
  user: string | undefined = undefined,
  tenant = 'local',
) => resolveEnvGrants({ env: env(settings), tenant, user, hostEnv });

describe('resolveEnvGrants', () => {
  it('starts secret-dark', () => {
    expect(grant({}, { HOME: '/home/ana', OPENAI_API_KEY: 'sk-123456789' }, 'telegram:1')).toEqual({
      env: {},
      names: [],
      missing: [],
      withheld: [],
      secretNames: [],
      redactValues: [],
    });
  });

  it('grants env.static literally; static values are not secrets and not redacted', () => {
    const r = grant({ static: { LANG: 'C.UTF-8', LONG_LITERAL: 'a-long-literal-value' } }, {});
    expect(r.env).toEqual({ LANG: 'C.UTF-8', LONG_LITERAL: 'a-long-literal-value' });
    expect(r.names).toEqual(['LANG', 'LONG_LITERAL']);
    expect(r.secretNames).toEqual([]);
    expect(r.redactValues).toEqual([]);
  });

  it('forwards exact names and lists the unset ones as missing', () => {
    const r = grant({ forward: ['NPM_CONFIG_REGISTRY', 'NOT_SET', 'EMPTY'] }, { NPM_CONFIG_REGISTRY: 'https://r', EMPTY: '' });
    expect(r.env).toEqual({ NPM_CONFIG_REGISTRY: 'https://r', EMPTY: '' });
    expect(r.missing).toEqual(['NOT_SET']);
    expect(r.secretNames).toEqual(['EMPTY', 'NPM_CONFIG_REGISTRY']);
  });

  it('an exact forward may name a provider credential (explicit grant)', () => {
    const r = grant({ forward: ['OPENAI_API_KEY', 'GH_TOKEN'] }, { OPENAI_API_KEY: 'sk-abcdefgh', GH_TOKEN: 'ghp_x' });
    expect(r.env).toEqual({ OPENAI_API_KEY: 'sk-abcdefgh', GH_TOKEN: 'ghp_x' });
  });

  it('a PREFIX_* glob never matches provider or bot credentials, nor per-user variables', () => {
    const r = grant(
      { forward: ['MY_*', 'BERTH_*'] },
      {
        MY_REGION: 'eu',
        MY_API_KEY: 'k',
        MY_TOKEN: 't',
        MY_BOT_TOKEN: 'b',
        MY_SECRET_THING: 's',
        MY_PASSWORD: 'p',
        MYOTHER: 'not matched',
        BERTH_USER_TELEGRAM_1_NAME: 'ana',
        BERTH_COLOR: 'on',
      },
    );
    expect(r.names).toEqual(['BERTH_COLOR', 'MY_REGION']);
    expect(r.missing).toEqual([]);
  });

  it('refuses a forward entry that names a per-user variable, and malformed patterns', () => {
    expect(() => grant({ forward: ['BERTH_USER_TELEGRAM_1_NAME'] }, {})).toThrow(ConfigError);
    expect(() => grant({ forward: ['*'] }, {})).toThrow(ConfigError);
    expect(() => grant({ forward: ['A*B'] }, {})).toThrow(ConfigError);
    expect(() => grant({ forward: [''] }, {})).toThrow(ConfigError);
    expect(parseForwardEntry('LIB_*')).toEqual({ kind: 'glob', prefix: 'LIB_' });
    expect(parseForwardEntry('LIB')).toEqual({ kind: 'exact', name: 'LIB' });
  });

  it('precedence: glob < static < exact forward < per-user', () => {
    const hostEnv = {
      APP_MODE: 'from-glob',
      APP_NAME: 'from-glob',
      APP_LEVEL: 'from-env',
      BERTH_USER_TELEGRAM_7_APP_LEVEL: 'users-own-level',
    };
    const r = grant(
      { forward: ['APP_*', 'APP_LEVEL'], static: { APP_NAME: 'static', APP_LEVEL: 'static' } },
      hostEnv,
      'telegram:7',
    );
    expect(r.env).toEqual({ APP_MODE: 'from-glob', APP_NAME: 'static', APP_LEVEL: 'users-own-level' });
    expect(r.secretNames).toEqual(['APP_LEVEL', 'APP_MODE']);
  });

  it("a user's value beats a global one of the same name", () => {
    const r = grant(
      { forward: ['GITHUB_TOKEN'], static: { EDITOR: 'vi' } },
      {
        GITHUB_TOKEN: 'global-token-value',
        BERTH_USER_TELEGRAM_123456789_GITHUB_TOKEN: 'ana-token-value',
        BERTH_USER_TELEGRAM_123456789_EDITOR: 'nano',
      },
      'telegram:123456789',
    );
    expect(r.env).toEqual({ GITHUB_TOKEN: 'ana-token-value', EDITOR: 'nano' });
    expect(r.redactValues).toEqual(['ana-token-value']);
  });

  it("a user never gets another user's values; no user gets no per-user values", () => {
    const hostEnv = {
      BERTH_USER_TELEGRAM_1_NAME: 'one',
      BERTH_USER_TELEGRAM_12_NAME: 'twelve',
      BERTH_USER_TELEGRAM_1_2_NAME: 'odd',
      BERTH_USER_SLACK_1_NAME: 'slack-one',
    };
    expect(grant({}, hostEnv, 'telegram:1').env).toEqual({ NAME: 'one' });
    expect(grant({}, hostEnv, 'telegram:12').env).toEqual({ NAME: 'twelve' });
    expect(grant({}, hostEnv, 'slack:1').env).toEqual({ NAME: 'slack-one' });
    expect(grant({}, hostEnv, undefined).env).toEqual({});
  });

  it('per-user names must start with a letter', () => {
    const r = grant({}, { BERTH_USER_TELEGRAM_1__X: 'a', BERTH_USER_TELEGRAM_1_9X: 'b', BERTH_USER_TELEGRAM_1_OK_1: 'c' }, 'telegram:1');
    expect(r.env).toEqual({ OK_1: 'c' });
  });

  it('redacts forwarded and per-user values of 8+ characters only, and only with env.redact', () => {
    const hostEnv = { A: '1234567', B: '12345678', C: 'a-much-longer-value', BERTH_USER_X_1_D: 'per-user-value' };
    const settings = { forward: ['A', 'B', 'C'], static: { S: 'static-long-value' } };
    expect(grant(settings, hostEnv, 'x:1').redactValues).toEqual(['a-much-longer-value', 'per-user-value', '12345678']);
    expect(grant({ ...settings, redact: false }, hostEnv, 'x:1').redactValues).toEqual([]);
  });

  it('does not redact a global value that a user value replaced (it is not in the sandbox)', () => {
    const r = grant({ forward: ['TOKEN_X'] }, { TOKEN_X: 'global-value-1', BERTH_USER_X_1_TOKEN_X: 'users-value-1' }, 'x:1');
    expect(r.redactValues).toEqual(['users-value-1']);
  });
});

describe('isProviderCredential', () => {
  it.each([
    'OPENAI_API_KEY', 'ANTHROPIC_API_KEY', 'ANTHROPIC_BASE_URL', 'MISTRAL_API_KEY', 'GH_TOKEN', 'GITHUB_TOKEN',
    'TELEGRAM_BOT_TOKEN', 'SLACKBOT_TOKEN', 'MY_BOT_TOKEN', 'DB_SECRET', 'CLIENT_SECRET_ID', 'AWS_ACCESS_KEY_ID',
    'AWS_REGION', 'NPM_TOKEN', 'DB_PASSWORD', 'STRIPE_KEY', 'SSH_AUTH_SOCK', 'KUBECONFIG', 'my_api_key',
  ])('%s is a credential', (name) => {
    expect(isProviderCredential(name)).toBe(true);
  });

  it.each(['PATH', 'LANG', 'MY_REGION', 'NODE_ENV', 'APP_MODE', 'KEYBOARD_LAYOUT', 'AUTHOR_NAME', 'PATH_PREFIX'])(
    '%s is not',
    (name) => {
      expect(isProviderCredential(name)).toBe(false);
    },
  );
});

describe('per-user variable naming', () => {
  it('encodes the documented examples', () => {
    expect(userEnvPrefix('BERTH_USER', 'telegram:123456789')).toBe('BERTH_USER_TELEGRAM_123456789_');
    expect(userEnvPrefix('BERTH_USER', 'whatsapp:+15551234567')).toBe('BERTH_USER_WHATSAPP___2B15551234567_');
    expect(encodeUserId('a_b')).toBe('a__5Fb');
    expect(encodeUserId('é')).toBe('__C3__A9');
    expect(encodeUserId('@ana:x.org')).toBe('__40ana__3Ax__2Eorg');
  });

  it('reads BERTH_USER_TELEGRAM_123456789_GITHUB_TOKEN for telegram:123456789', () => {
    const r = grant({}, { BERTH_USER_TELEGRAM_123456789_GITHUB_TOKEN: 'tok' }, 'telegram:123456789');
    expect(r.env).toEqual({ GITHUB_TOKEN: 'tok' });
  });

  it('reads BERTH_USER_WHATSAPP___2B15551234567_NAME for whatsapp:+15551234567', () => {
    const r = grant({}, { BERTH_USER_WHATSAPP___2B15551234567_NAME: 'ana' }, 'whatsapp:+15551234567');
    expect(r.env).toEqual({ NAME: 'ana' });
  });

  it('decodes strictly', () => {
    expect(decodeUserId('__2B15551234567')).toBe('+15551234567');
    expect(decodeUserId('a_b')).toBeUndefined();
    expect(decodeUserId('__41')).toBeUndefined(); // 'A' is never escaped
    expect(decodeUserId('__2b')).toBeUndefined(); // lower hex is never produced
    expect(decodeUserId('__C3')).toBeUndefined(); // not UTF-8
  });

  it('distinct users never share a variable (property, several thousand random ids)', () => {
    // mulberry32: deterministic, so a failure can be replayed.
    let seed = 0x5eed;
    const rand = () => {
      seed = (seed + 0x6d2b79f5) >>> 0;
      let t = seed;
      t = Math.imul(t ^ (t >>> 15), t | 1);
      t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
      return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
    };
    const pieces = [...'aZ09_-+.:@#~!%', 'é', '中', '😀', '__', '_A', '_5F', '__41', '2B'];
    const platforms = ['telegram', 'slack', 'x', 'wa2'];
    const users = new Set<string>();
    for (let tries = 0; users.size < 4000 && tries < 100_000; tries++) {
      let id = '';
      const n = 1 + Math.floor(rand() * 6);
      for (let i = 0; i < n; i++) id += pieces[Math.floor(rand() * pieces.length)];
      if (id === '.' || id === '..') continue;
      users.add(`${platforms[Math.floor(rand() * platforms.length)]}:${id}`);
    }
    const list = [...users];
    expect(list).toHaveLength(4000);
    const prefixes = list.map((u) => userEnvPrefix('BERTH_USER', u));
    // Every encoding round-trips.
    list.forEach((u) => expect(decodeUserId(encodeUserId(u.slice(u.indexOf(':') + 1)))).toBe(u.slice(u.indexOf(':') + 1)));
    // Exhaustively: a variable of user a is visible to user b only if one prefix is a proper
    // prefix of the other and the remainder starts with a letter (a valid name). Never happens.
    const all = new Set(prefixes);
    expect(all.size).toBe(list.length);
    for (const p of prefixes) {
      for (let k = 1; k < p.length; k++) {
        if (all.has(p.slice(0, k))) expect(p[k]).not.toMatch(/[A-Za-z]/);
      }
    }
    // End to end on a sample: one variable per user, and each user sees exactly their own.
    const hostEnv: Record<string, string> = {};
    list.forEach((u, i) => {
      hostEnv[`${prefixes[i]}NAME`] = u;
      hostEnv[`${prefixes[i]}A_B`] = u;
    });
    for (const u of list.slice(0, 300)) {
      expect(grant({}, hostEnv, u).env).toEqual({ NAME: u, A_B: u });
    }
  });

  it('deliverUserValues: false leaves the user\'s own values out, names them as withheld, and keeps a global value of the same name', () => {
    const hostEnv = {
      GH_TOKEN: 'global-token-value',
      BERTH_USER_TELEGRAM_1_GH_TOKEN: 'ana-token-value',
      BERTH_USER_TELEGRAM_1_NPM_TOKEN: 'ana-npm-value',
    };
    const base = { env: env({ forward: ['GH_TOKEN'] }), tenant: 'local', user: 'telegram:1', hostEnv };
    const own = resolveEnvGrants(base);
    expect(own.env).toEqual({ GH_TOKEN: 'ana-token-value', NPM_TOKEN: 'ana-npm-value' });
    expect(own.withheld).toEqual([]);
    const shared = resolveEnvGrants({ ...base, deliverUserValues: false });
    expect(shared.env).toEqual({ GH_TOKEN: 'global-token-value' });
    expect(shared.withheld).toEqual(['NPM_TOKEN']);
    expect(shared.redactValues).not.toContain('ana-token-value');
  });
});

describe('per-user values belong to (tenant, platform, id)', () => {
  const hostEnv = {
    // tenant local, bare form (the reference agent's naming)
    BERTH_USER_TELEGRAM_111_GITHUB_TOKEN: 'local-user-111-token',
    // tenant acme's telegram:111, explicit form
    BERTH_USER__acme_TELEGRAM_111_GITHUB_TOKEN: 'acme-user-111-token',
    BERTH_USER__acme_TELEGRAM_111_ONLY_ACME: 'acme-only-value',
  };

  it("tenant B naming tenant A's user id gets none of A's values", () => {
    expect(grant({}, hostEnv, 'telegram:111', 'beta').env).toEqual({});
    expect(grant({}, hostEnv, 'telegram:111', 'acme').env).toEqual({ GITHUB_TOKEN: 'acme-user-111-token', ONLY_ACME: 'acme-only-value' });
  });

  it('the bare form belongs to tenant local only (single-tenant installations keep the reference naming)', () => {
    expect(grant({}, hostEnv, 'telegram:111', 'local').env).toEqual({ GITHUB_TOKEN: 'local-user-111-token' });
    expect(grant({}, { BERTH_USER_TELEGRAM_111_X: 'bare-value' }, 'telegram:111', 'acme').env).toEqual({});
  });

  it('tenant local may use the explicit form too, and it beats the bare one', () => {
    const r = grant({}, { BERTH_USER_TELEGRAM_1_T: 'bare-value', BERTH_USER__local_TELEGRAM_1_T: 'explicit-value' }, 'telegram:1', 'local');
    expect(r.env).toEqual({ T: 'explicit-value' });
  });

  it('encodes tenant names like ids, and the two forms never overlap', () => {
    expect(tenantUserEnvPrefix('BERTH_USER', 'team-a', 'telegram:111')).toBe('BERTH_USER__team__2Da_TELEGRAM_111_');
    expect(userEnvPrefixes('BERTH_USER', 'local', 'telegram:1')).toEqual(['BERTH_USER_TELEGRAM_1_', 'BERTH_USER__local_TELEGRAM_1_']);
    expect(userEnvPrefixes('BERTH_USER', 'acme', 'telegram:1')).toEqual(['BERTH_USER__acme_TELEGRAM_1_']);
  });

  it('distinct (tenant, user) pairs never share a variable (property over tenants and users)', () => {
    const tenants = ['local', 'acme', 'a', 'A', 'a.b', 'a_b', 'a-b', 'ab', '_', '__', 'team-a', '1', 'x_41'];
    const users = ['telegram:1', 'telegram:11', 'telegram:1_1', 'slack:A', 'slack:a', 'x:_', 'x:__41', 'wa:+1', 'telegram:acme'];
    const pairs = tenants.flatMap((t) => users.map((u) => ({ t, u })));
    const prefixesOf = (p: { t: string; u: string }) => userEnvPrefixes('BERTH_USER', p.t, p.u);
    const hostEnv: Record<string, string> = {};
    for (const p of pairs) for (const prefix of prefixesOf(p)) hostEnv[`${prefix}NAME`] = `${p.t}|${p.u}`;
    for (const p of pairs) {
      // Every variable a pair receives was written for that very pair.
      expect(grant({}, hostEnv, p.u, p.t).env).toEqual({ NAME: `${p.t}|${p.u}` });
    }
  });

  it("a secrets file's sections are per tenant: [platform:id] is tenant local's, [tenant/platform:id] that tenant's", () => {
    const secrets = {
      global: new Map<string, string>(),
      users: new Map([
        ['local/telegram:111', new Map([['GITHUB_TOKEN', 'file-local-111']])],
        ['acme/telegram:111', new Map([['GITHUB_TOKEN', 'file-acme-111']])],
      ]),
    };
    const of = (tenant: string) => resolveEnvGrants({ env: env(), tenant, user: 'telegram:111', hostEnv: {}, secrets }).env;
    expect(of('local')).toEqual({ GITHUB_TOKEN: 'file-local-111' });
    expect(of('acme')).toEqual({ GITHUB_TOKEN: 'file-acme-111' });
    expect(of('beta')).toEqual({});
  });
});

