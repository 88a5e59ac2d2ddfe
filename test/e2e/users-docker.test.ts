import { createHash, randomBytes } from 'node:crypto';
import { chmodSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { expect, it } from 'vitest';
import { parseConfig } from '../../src/setup/parse-config.js';
import { runBerth, tempInstall } from '../helpers/cli.js';
import { describeDocker, dockerConfig, IMAGE, installs,
  dockerSuiteHooks,} from '../helpers/docker-e2e.js';

/*
 * Many end users on one gateway: scope auto, userSandbox on, docker, persistent false.
 * Each user has their own sandbox and their own GITHUB_TOKEN, from berth's environment or a
 * secrets file; nothing of one user reaches the other, through files, env, /proc or the audit log.
 */

const reg = installs('berth-dusers-');
const sha = (s: string): string => createHash('sha256').update(s).digest('hex');

const ANA = 'telegram:111111111';
const BEN = 'whatsapp:+15551234567';
const anaToken = `ghp_ana_${randomBytes(12).toString('hex')}`;
const benToken = `ghp_ben_${randomBytes(12).toString('hex')}`;
const gatewayEnv = {
  PATH: process.env['PATH'],
  BERTH_USER_TELEGRAM_111111111_GITHUB_TOKEN: anaToken,
  // The "+" of a phone number is written __2B (see env-grants.ts: encodeUserId).
  BERTH_USER_WHATSAPP___2B15551234567_GITHUB_TOKEN: benToken,
};

describeDocker('two users on one gateway (real docker)', () => {
  dockerSuiteHooks(reg);

  it('each user has their own sandbox, files and GITHUB_TOKEN; neither sees the other\'s, through env, /proc or the audit log', async () => {
    const t = reg.track();
    const b = await t.open(dockerConfig({ persistent: false }), { env: gatewayEnv });
    const ana = { user: ANA, session: 'chat-ana' };
    const ben = { user: BEN, session: 'chat-ben' };
    expect(b.explain(ana)).toMatchObject({ sandboxKey: `user:${ANA}`, rule: 'auto:3', envNames: ['GITHUB_TOKEN'] });

    // Each reads their own token: compared by hash inside the sandbox, since output is redacted.
    const readOwn = 'echo secret > /workspace/mine.txt; printf %s "$GITHUB_TOKEN" | sha256sum | cut -d" " -f1';
    const ra = await b.exec(ana, readOwn);
    const rb = await b.exec(ben, readOwn);
    expect(ra.stdout.trim()).toBe(sha(anaToken));
    expect(rb.stdout.trim()).toBe(sha(benToken));
    expect(ra.sandboxKey).not.toBe(rb.sandboxKey);

    // Files: the other's file is not there (separate containers), nor through cp/export.
    await b.exec(ana, 'echo ana-only > /workspace/ana.txt');
    expect((await b.exec(ben, 'cat /workspace/ana.txt')).exitCode).not.toBe(0);
    await expect(b.files.exportPath(ben, { path: '/workspace/ana.txt' })).rejects.toThrow(/does not exist/);

    // env, PID 1's environ and every process's environ, as returned to the caller.
    const probes = [
      'env',
      'tr "\\0" "\\n" < /proc/1/environ',
      'for f in /proc/[0-9]*/environ; do tr "\\0" "\\n" < "$f"; echo; done 2>/dev/null',
    ];
    for (const probe of probes) {
      const pa = await b.exec(ana, probe);
      const pb = await b.exec(ben, probe);
      for (const [r, other] of [[pa, benToken], [pb, anaToken]] as const) {
        expect(r.output.includes(other), probe).toBe(false);
        expect(r.stdout.includes(other), probe).toBe(false);
      }
      // Their own token is in their own shell's env, but redacted in what comes back.
      expect(pa.output.includes(anaToken), probe).toBe(false);
      expect(pb.output.includes(benToken), probe).toBe(false);
    }
    // PID 1 (the init) carries no token at all: count, not print.
    for (const s of [ana, ben]) {
      const init = await b.exec(s, 'tr "\\0" "\\n" < /proc/1/environ | grep -c -e TOKEN -e "^BERTH_" || true');
      expect(init.stdout.trim()).toBe('0');
    }

    // A token printed by a command, or written literally in one, never comes back, nor into the audit log.
    const leak = await b.exec(ana, `echo "$GITHUB_TOKEN"; echo "$GITHUB_TOKEN" >&2; echo ${anaToken}`);
    for (const text of [leak.stdout, leak.stderr, leak.output]) {
      expect(text).not.toContain(anaToken);
      expect(text).toContain('[REDACTED]');
    }
    const anaAudit = b.audit({ tenant: 'local', user: ANA });
    const benAudit = b.audit({ tenant: 'local', user: BEN });
    expect(anaAudit.length).toBeGreaterThan(4);
    expect(benAudit.every((e) => e.user === BEN)).toBe(true);
    const dump = JSON.stringify([anaAudit, benAudit]);
    expect(dump).not.toContain(anaToken);
    expect(dump).not.toContain(benToken);
    expect(anaAudit[0]!.command).toBe('echo "$GITHUB_TOKEN"; echo "$GITHUB_TOKEN" >&2; echo [REDACTED]');
    expect(anaAudit.every((e) => e.user === ANA)).toBe(true);
  });

  it('a secrets file: per-user sections reach only their user; berth\'s environment beats the file', async () => {
    const t = reg.track();
    const file = join(t.dir, 'secrets.env');
    writeFileSync(file, [
      '# gateway secrets',
      `[${ANA}]`,
      `GITHUB_TOKEN=from-file-${anaToken}`,
      'NPM_TOKEN="npm-ana-0123456789"',
      `[${BEN}]`,
      'NPM_TOKEN=npm-ben-0123456789',
    ].join('\n'));
    chmodSync(file, 0o600);
    const b = await t.open(dockerConfig({ persistent: false, env: { secretsFile: file } }), { env: gatewayEnv });
    const probe = 'printf "%s %s" "$GITHUB_TOKEN" "$NPM_TOKEN" | sha256sum | cut -d" " -f1';
    expect((await b.exec({ user: ANA }, probe)).stdout.trim()).toBe(sha(`${anaToken} npm-ana-0123456789`));
    expect((await b.exec({ user: BEN }, probe)).stdout.trim()).toBe(sha(`${benToken} npm-ben-0123456789`));
    const out = await b.exec({ user: BEN }, 'env');
    expect(out.output).not.toContain('npm-ana');
    expect(out.output).not.toContain('npm-ben-0123456789');
  });

  it('malformed user ids are refused by the CLI with exit 2 and the expected form; none reaches a sandbox', async () => {
    using t = tempInstall(`backend: docker\npersistent: false\ndocker:\n  image: ${IMAGE}\n`);
    for (const user of ['telegram', 'Telegram:1', 'telegram:', 'telegram:a b', 'telegram:a/b', 'telegram:..', `x:${'9'.repeat(129)}`]) {
      const r = await runBerth(['exec', '--user', user, '--', 'echo ran'], { env: t.env, cwd: t.dir });
      expect(r.code, user).toBe(2);
      expect(r.stdout).toBe('');
      expect(r.stderr, user).toMatch(/^berth: .*expected the form `platform:id`, e\.g\. telegram:123456789\n$/);
    }
    expect(parseConfig({}).base.userSandbox).toBe(true);
  });
});
