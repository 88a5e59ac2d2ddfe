import { describe, expect, it } from 'vitest';
import { resolveCredentialGrants, unsetCredentialSources } from '../../src/policy/credential-grants.js';
import type { EnvGrantInput } from '../../src/policy/env-grants.js';

const secret = Buffer.alloc(32, 7);
const spec = { name: 'GITHUB_TOKEN', from: 'GH_REAL', hosts: ['api.github.com'] };
const base: EnvGrantInput = {
  env: { static: {}, forward: [], perUserPrefix: 'BERTH_USER', redact: true },
  tenant: 'local', user: undefined, hostEnv: { GH_REAL: 'ghp_global_value' },
};

describe('resolveCredentialGrants', () => {
  it('gives the proxy the value and the sandbox a placeholder under the credential name, never the value', () => {
    const g = resolveCredentialGrants([spec], base, secret, 'a'.repeat(64));
    expect(g.credentials).toHaveLength(1);
    expect(g.credentials[0]!.value).toBe('ghp_global_value');
    expect(g.env['GITHUB_TOKEN']).toMatch(/^berth-ph-[0-9a-f]{32}$/);
    expect(JSON.stringify(g.env)).not.toContain('ghp_global_value');
    expect(g.env['GH_REAL']).toBeUndefined();
  });

  it('a placeholder is per sandbox and per name, and stable for one sandbox', () => {
    const a = resolveCredentialGrants([spec], base, secret, 'a'.repeat(64)).env['GITHUB_TOKEN'];
    const again = resolveCredentialGrants([spec], base, secret, 'a'.repeat(64)).env['GITHUB_TOKEN'];
    const b = resolveCredentialGrants([spec], base, secret, 'b'.repeat(64)).env['GITHUB_TOKEN'];
    expect(again).toBe(a);
    expect(b).not.toBe(a);
  });

  it('a user\'s own value beats the global one in the user\'s own sandbox, and is withheld from a shared one', () => {
    const hostEnv = { BERTH_USER_TELEGRAM_42_GH_REAL: 'ghp_user_42_value' };
    const own = resolveCredentialGrants([spec], { ...base, user: 'telegram:42', hostEnv: { ...hostEnv, GH_REAL: 'ghp_global_value' } }, secret, 'c'.repeat(64));
    expect(own.credentials[0]!.value).toBe('ghp_user_42_value');
    const shared = resolveCredentialGrants([spec], { ...base, user: 'telegram:42', hostEnv, deliverUserValues: false }, secret, 'c'.repeat(64));
    expect(shared.credentials).toEqual([]);
    expect(shared.withheld).toEqual(['GITHUB_TOKEN']);
    expect(shared.env).toEqual({});
  });

  it('another user, or the same user id in another tenant, gets none of a user\'s value', () => {
    const hostEnv = { BERTH_USER_TELEGRAM_42_GH_REAL: 'ghp_user_42_value' };
    expect(resolveCredentialGrants([spec], { ...base, user: 'telegram:43', hostEnv }, secret, 'd'.repeat(64)).missing).toEqual(['GITHUB_TOKEN']);
    expect(resolveCredentialGrants([spec], { ...base, tenant: 'acme', user: 'telegram:42', hostEnv }, secret, 'd'.repeat(64)).missing).toEqual(['GITHUB_TOKEN']);
  });
});

describe('unsetCredentialSources', () => {
  const place = { profile: 'bot', credentials: [spec], env: { perUserPrefix: 'BERTH_USER' } };
  const none = new Map();

  it('names a credential whose source is set nowhere, with its key and the fix', () => {
    expect(unsetCredentialSources(place, {}, none)).toEqual([
      expect.stringMatching(/^config key "profiles\.bot\.credentials\.GITHUB_TOKEN": its value "GH_REAL" is set nowhere .*fix "from"$/),
    ]);
    expect(unsetCredentialSources(place, { GH_REAL: '' }, none)).toHaveLength(1);
  });

  it('a global value, a user\'s own variable or a secrets-file value of any user is enough', () => {
    expect(unsetCredentialSources(place, { GH_REAL: 'x' }, none)).toEqual([]);
    expect(unsetCredentialSources(place, { BERTH_USER_TELEGRAM_42_GH_REAL: 'x' }, none)).toEqual([]);
    const file = { global: new Map(), users: new Map([['local/telegram:1', new Map([['GH_REAL', 'x']])]]) };
    expect(unsetCredentialSources({ ...place, env: { ...place.env, secretsFile: '/s' } }, {}, new Map([['/s', file]]))).toEqual([]);
  });
});
