import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { parseSecretsFile, readSecretsFile } from '../../src/policy/secrets-file.js';
import { ConfigError } from '../../src/errors.js';
import { resolveEnvGrants } from '../../src/policy/env-grants.js';

const SECRET = 'do-not-print-this-value';

describe('parseSecretsFile', () => {
  it('reads globals, per-user sections, comments, export, and quoted values', () => {
    const f = parseSecretsFile([
      '# a comment',
      '',
      'export OPENAI_API_KEY=sk-abc#not-a-comment',
      'BERTH_USER_TELEGRAM_1_GH_TOKEN = flat-value ',
      '[telegram:123456789]',
      'GITHUB_TOKEN="ghp \\"quoted\\"\\nline"',
      "NOTE='single $literal'",
      '[whatsapp:+15551234567]',
      'GITHUB_TOKEN=wa-token',
    ].join('\n'), '/s.env');
    expect(Object.fromEntries(f.global)).toEqual({ OPENAI_API_KEY: 'sk-abc#not-a-comment', BERTH_USER_TELEGRAM_1_GH_TOKEN: 'flat-value' });
    expect(Object.fromEntries(f.users.get('local/telegram:123456789')!)).toEqual({ GITHUB_TOKEN: 'ghp "quoted"\nline', NOTE: 'single $literal' });
    expect(Object.fromEntries(f.users.get('local/whatsapp:+15551234567')!)).toEqual({ GITHUB_TOKEN: 'wa-token' });
  });

  it('errors name the file and line and never echo a value', () => {
    const cases: [string, RegExp][] = [
      [`just ${SECRET}`, /line 1: expected NAME=value/],
      [`A=1\n1BAD=${SECRET}`, /line 2: the text before "=" is not a variable name/],
      [`A=${SECRET}\nA=${SECRET}`, /line 2: this variable is set twice before the first section/],
      [`[telegram:1]\nX=1\n[telegram:1]`, /line 3: this section names the same user as the one at line 1/],
      [`[telegram:1]\nX=1\n[local/telegram:1]`, /line 3: this section names the same user as the one at line 1/],
      [`[Telegram:1]\nX=${SECRET}`, /line 1: the section header does not name a user; .*\[tenant\/platform:id\]/],
      [`[telegram:a b]`, /line 1: the section header does not name a user/],
      [`[bad tenant/telegram:1]`, /line 1: the section header does not name a user/],
      [`[telegram:1\nX=1`, /line 1: a section header is \[platform:id\]/],
      [`X="${SECRET}`, /line 1: a double-quoted value must end with "/],
      [`X="a\\t${SECRET}"`, /line 1: unknown escape/],
      [`[telegram:1]\n_X=${SECRET}`, /line 2: the text before "=" is not a variable name; use letters, digits and "_", starting with a letter/],
    ];
    for (const [text, want] of cases) {
      let err: unknown;
      try {
        parseSecretsFile(text, '/etc/berth/secrets.env');
      } catch (e) {
        err = e;
      }
      expect(err, text).toBeInstanceOf(ConfigError);
      expect((err as Error).message, text).toMatch(want);
      expect((err as Error).message).toContain('secrets file /etc/berth/secrets.env');
      expect((err as Error).message).not.toContain(SECRET);
    }
  });

  it('never echoes any text of a bad line: a pasted PEM line or section stays out of the message', () => {
    const pemLine = 'MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7';
    for (const text of [`${pemLine}+/x=1`, `[${pemLine}]`, `[tel:${pemLine} x]`, `[${pemLine}`, `A=1\nA=${pemLine}`]) {
      let err: unknown;
      try {
        parseSecretsFile(text, '/s.env');
      } catch (e) {
        err = e;
      }
      expect(err, text).toBeInstanceOf(ConfigError);
      expect((err as Error).message, text).not.toContain(pemLine.slice(0, 12));
    }
  });

  it('reads [tenant/platform:id] sections for that tenant', () => {
    const f = parseSecretsFile('[acme/telegram:1]\nT=acme-value\n[telegram:1]\nT=local-value\n', '/s.env');
    expect(Object.fromEntries(f.users.get('acme/telegram:1')!)).toEqual({ T: 'acme-value' });
    expect(Object.fromEntries(f.users.get('local/telegram:1')!)).toEqual({ T: 'local-value' });
  });

  describe('readSecretsFile', () => {
    const dirs: string[] = [];
    afterEach(() => {
      for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
    });
    it('refuses a file others can read, a missing file and a directory', () => {
      const dir = mkdtempSync(join(tmpdir(), 'berth-secrets-'));
      dirs.push(dir);
      const p = join(dir, 's.env');
      writeFileSync(p, `A=${SECRET}\n`, { mode: 0o644 });
      chmodSync(p, 0o644);
      expect(() => readSecretsFile(p)).toThrow(/accessible by group or others \(mode 644\); run chmod 600/);
      chmodSync(p, 0o600);
      expect(Object.fromEntries(readSecretsFile(p).global)).toEqual({ A: SECRET });
      expect(() => readSecretsFile(join(dir, 'nope.env'))).toThrow(/does not exist/);
      expect(() => readSecretsFile(dir)).toThrow(/not a regular file/);
    });
  });
});

describe('secrets file in env grants', () => {
  const env = { static: {}, forward: ['OPENAI_API_KEY', 'ONLY_ENV'], perUserPrefix: 'BERTH_USER', redact: true };
  const secrets = parseSecretsFile([
    'OPENAI_API_KEY=file-global-key',
    'BERTH_USER_TELEGRAM_1_FLAT=file-flat-value',
    '[telegram:1]',
    'GITHUB_TOKEN=file-user1-token',
    'FLAT=section-value',
    'OPENAI_API_KEY=user1-own-key',
    '[telegram:2]',
    'GITHUB_TOKEN=file-user2-token',
  ].join('\n'), '/s.env');

  it('globals read like the environment (the environment wins); a user section reaches only its user and beats globals', () => {
    const u1 = resolveEnvGrants({ env, tenant: 'local', user: 'telegram:1', hostEnv: { ONLY_ENV: 'from-env-1234' }, secrets });
    expect(u1.env).toEqual({ OPENAI_API_KEY: 'user1-own-key', ONLY_ENV: 'from-env-1234', GITHUB_TOKEN: 'file-user1-token', FLAT: 'file-flat-value' });
    expect(u1.redactValues).toContain('file-user1-token');
    const u2 = resolveEnvGrants({ env, tenant: 'local', user: 'telegram:2', hostEnv: { OPENAI_API_KEY: 'env-global-key' }, secrets });
    expect(u2.env).toEqual({ OPENAI_API_KEY: 'env-global-key', GITHUB_TOKEN: 'file-user2-token' });
    expect(JSON.stringify(u2)).not.toContain('user1');
    const nobody = resolveEnvGrants({ env, tenant: 'local', user: undefined, hostEnv: {}, secrets });
    expect(nobody.env).toEqual({ OPENAI_API_KEY: 'file-global-key' });
    expect(nobody.missing).toEqual(['ONLY_ENV']);
  });

  it("a per-user variable in berth's environment beats the file's section for the same user", () => {
    const r = resolveEnvGrants({ env, tenant: 'local', user: 'telegram:1', hostEnv: { BERTH_USER_TELEGRAM_1_GITHUB_TOKEN: 'env-user1-token' }, secrets });
    expect(r.env['GITHUB_TOKEN']).toBe('env-user1-token');
  });
});
