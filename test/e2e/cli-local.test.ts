import { existsSync, mkdtempSync, readdirSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { utils } from 'ssh2';
import { describe, expect, it } from 'vitest';
import { runBerth, tempInstall } from '../helpers/cli.js';

const LOCAL = 'backend: local\npersistent: false\n';

describe('berth CLI on the local backend (real processes)', () => {
  it('two sessions do not see each other\'s files', async () => {
    using t = tempInstall(LOCAL);
    const a = await runBerth(['exec', '--session', 'alice', '--', 'echo', 'from-alice', '>', 'note.txt'], { env: t.env, cwd: t.dir });
    expect(a.stderr).toBe('');
    expect(a.code).toBe(0);
    const b = await runBerth(['exec', '--session', 'bob', '--', 'cat note.txt'], { env: t.env, cwd: t.dir });
    expect(b.code).toBe(1);
    expect(b.stderr).toMatch(/note\.txt: No such file/);
    const a2 = await runBerth(['exec', '--session', 'alice', '--', 'cat note.txt'], { env: t.env, cwd: t.dir });
    expect(a2).toMatchObject({ code: 0, stdout: 'from-alice\n' });
  });

  it('close of a session nobody opened says there was nothing to close; an open one is closed', async () => {
    using t = tempInstall(LOCAL);
    const unknown = await runBerth(['close', '--session', 'never-opened'], { env: t.env, cwd: t.dir });
    expect(unknown).toEqual({ code: 0, stdout: 'no open session by that name: nothing to close\n', stderr: '' });
    const json = await runBerth(['close', '--session', 'never-opened', '--json'], { env: t.env, cwd: t.dir });
    expect(JSON.parse(json.stdout)).toEqual({ removed: [], kept: [], wasOpen: false });
    expect((await runBerth(['exec', '--session', 's1', '--', 'true'], { env: t.env, cwd: t.dir })).code).toBe(0);
    const open = await runBerth(['close', '--session', 's1'], { env: t.env, cwd: t.dir });
    expect(open).toEqual({ code: 0, stdout: 'closed; removed: session:s1; kept: (none)\n', stderr: '' });
    const again = await runBerth(['close', '--session', 's1'], { env: t.env, cwd: t.dir });
    expect(again.stdout).toBe('no open session by that name: nothing to close\n');
  });

  it('--workdir naming a directory that does not exist is berth refusing the call (exit 125), not the command failing', async () => {
    using t = tempInstall(LOCAL);
    const r = await runBerth(['exec', '--session', 'w', '--workdir', '/no/such/dir', '--', 'echo ran'], { env: t.env, cwd: t.dir });
    expect(r.code).toBe(125);
    expect(r.stdout).toBe('');
    expect(r.stderr).toMatch(/^berth: .*\/no\/such\/dir.*\n$/);
  });

  it('a timeout is said once, in one berth line on stderr, and exits 124', async () => {
    using t = tempInstall(LOCAL);
    const r = await runBerth(['exec', '--session', 'slow', '--timeout', '1', '--', 'echo started; sleep 30; echo never'], { env: t.env, cwd: t.dir });
    expect(r.code).toBe(124);
    expect(r.stdout).toBe('started\n');
    const berthLines = r.stderr.split('\n').filter((l) => l.startsWith('berth:'));
    expect(berthLines).toHaveLength(1);
    expect(berthLines[0]).toMatch(/^berth: timed out after 1000 ms; the command's processes were killed/);
    // Nothing else: no "bash: line 1: 123 Killed sleep 30" of the job the kill ended.
    expect(r.stderr).toBe(`${berthLines[0]}\n`);
    await runBerth(['close', '--session', 'slow'], { env: t.env, cwd: t.dir });
  });

  it('a cd in one berth exec is seen by the next one in the same session, not by another session', async () => {
    using t = tempInstall(LOCAL);
    const first = await runBerth(['exec', '--session', 's1', '--', 'mkdir -p deep/er && cd deep/er'], { env: t.env, cwd: t.dir });
    expect(first.code).toBe(0);
    const second = await runBerth(['exec', '--session', 's1', '--json', '--', 'pwd'], { env: t.env, cwd: t.dir });
    const r = JSON.parse(second.stdout) as { stdout: string; cwd: string };
    expect(r.stdout.trim()).toMatch(/\/deep\/er$/);
    expect(r.cwd).toMatch(/\/deep\/er$/);
    const other = await runBerth(['exec', '--session', 's2', '--', 'pwd'], { env: t.env, cwd: t.dir });
    expect(other.stdout.trim()).not.toMatch(/deep\/er$/);
  });

  it('exported env, functions and aliases survive into the next berth exec', async () => {
    using t = tempInstall(LOCAL);
    await runBerth(['exec', '--session', 's', '--', 'export GREETING=hi; greet() { echo "$GREETING $1"; }; alias ll="echo aliased"'], { env: t.env, cwd: t.dir });
    const r = await runBerth(['exec', '--session', 's', '--', 'greet you; alias ll'], { env: t.env, cwd: t.dir });
    expect(r.stdout).toBe("hi you\nalias ll='echo aliased'\n");
  });

  it('--json prints exactly one single-line JSON object with the contract fields', async () => {
    using t = tempInstall(LOCAL);
    const r = await runBerth(['exec', '--session', 'j', '--json', '--', 'echo out; echo err >&2; (exit 3)'], { env: t.env, cwd: t.dir });
    expect(r.code).toBe(3);
    const lines = r.stdout.split('\n');
    expect(lines).toHaveLength(2);
    expect(lines[1]).toBe('');
    const j = JSON.parse(lines[0]!) as Record<string, unknown>;
    expect(Object.keys(j).sort()).toEqual(['cwd', 'durationMs', 'exitCode', 'output', 'sandboxKey', 'stderr', 'stdout', 'timedOut', 'truncated'].sort());
    expect(j).toMatchObject({ exitCode: 3, stdout: 'out\n', stderr: 'err\n', sandboxKey: 'session:j', timedOut: false, truncated: false });
  });

  it('a command over exec.maxOutputChars leaves no spill file: streamed whole, or --json says truncated without a path', async () => {
    using t = tempInstall(`${LOCAL}exec:\n  maxOutputChars: 1000\n`);
    const spill = join(t.home, 'spill');
    const left = (): string[] => (existsSync(spill) ? readdirSync(spill) : []);
    const r = await runBerth(['exec', '--session', 'sp', '--', 'head -c 50000 /dev/zero | tr "\\0" a'], { env: t.env, cwd: t.dir });
    expect(r).toEqual({ code: 0, stdout: 'a'.repeat(50_000), stderr: '' });
    expect(left()).toEqual([]);
    const j = await runBerth(['exec', '--session', 'sp', '--json', '--', 'head -c 50000 /dev/zero | tr "\\0" b'], { env: t.env, cwd: t.dir });
    expect(j.code).toBe(0);
    const res = JSON.parse(j.stdout) as Record<string, unknown>;
    expect(res).toMatchObject({ truncated: true, exitCode: 0 });
    expect(res).not.toHaveProperty('fullOutputPath');
    expect(res['stdout']).toMatch(/\[\.\.\. \d+ chars omitted \.\.\.\]/);
    expect(left()).toEqual([]);
  });

  it('streams output and exits with the command\'s own code', async () => {
    using t = tempInstall(LOCAL);
    const r = await runBerth(['exec', '--session', 'x', '--', 'echo a; echo b >&2; exit 7'], { env: t.env, cwd: t.dir });
    expect(r).toEqual({ code: 7, stdout: 'a\n', stderr: 'b\n' });
  });

  it('a timeout exits 124 and the session stays usable', async () => {
    using t = tempInstall(LOCAL);
    const r = await runBerth(['exec', '--session', 't', '--timeout', '1', '--', 'echo started; sleep 30'], { env: t.env, cwd: t.dir });
    expect(r.code).toBe(124);
    expect(r.stdout).toBe('started\n');
    expect(r.stderr).toMatch(/timed out/);
    const again = await runBerth(['exec', '--session', 't', '--', 'echo fine'], { env: t.env, cwd: t.dir });
    expect(again).toMatchObject({ code: 0, stdout: 'fine\n' });
  });

  it('the shell environment is built from grants only, never the host environment', async () => {
    using t = tempInstall(`${LOCAL}env:\n  static:\n    MODE: demo\n  forward: [SHARED_OK]\n`);
    const env = { ...t.env, OPENAI_API_KEY: 'sk-host-secret-value', HOST_ONLY: 'leak', SHARED_OK: 'forwarded-value-123' };
    const r = await runBerth(['exec', '--session', 'e', '--', 'echo "${OPENAI_API_KEY:-none} ${HOST_ONLY:-none} $MODE"; echo "$SHARED_OK"'], { env, cwd: t.dir });
    expect(r.code).toBe(0);
    // The forwarded value is granted, and redacted from what is returned to the caller.
    expect(r.stdout).toBe('none none demo\n[REDACTED]\n');
  });

  it('bad config gives exit 2 and a one-line remedy', async () => {
    using t = tempInstall('backend: local\nscope: sesion\n');
    const r = await runBerth(['exec', '--session', 'x', '--', 'true'], { env: t.env, cwd: t.dir });
    expect(r.code).toBe(2);
    expect(r.stdout).toBe('');
    expect(r.stderr.split('\n').filter(Boolean)).toHaveLength(1);
    expect(r.stderr).toMatch(/^berth: .*scope/);
    const check = await runBerth(['config', 'check'], { env: t.env, cwd: t.dir });
    expect(check.code).toBe(2);
    expect(check.stderr).toMatch(/^berth: .*scope/);
  });

  it('usage errors exit 2: missing command after --, unknown flag, --parent without --task', async () => {
    using t = tempInstall(LOCAL);
    const noCmd = await runBerth(['exec', '--session', 'x'], { env: t.env, cwd: t.dir });
    expect(noCmd.code).toBe(2);
    expect(noCmd.stderr).toMatch(/needs a command after "--"/);
    const unknown = await runBerth(['exec', '--sesion', 'x', '--', 'true'], { env: t.env, cwd: t.dir });
    expect(unknown.code).toBe(2);
    const parent = await runBerth(['explain', '--parent', 'p'], { env: t.env, cwd: t.dir });
    expect(parent.code).toBe(2);
    expect(parent.stderr).toMatch(/--parent .* needs --task/);
  });

  it('a refused workspace exits 125 with the path and the rule', async () => {
    using t = tempInstall(LOCAL);
    const r = await runBerth(['exec', '--session', 'x', '--workspace', join(t.home, 'nope-missing'), '--', 'true'], { env: t.env, cwd: t.dir });
    expect(r.code).toBe(125);
    expect(r.stderr).toMatch(/nope-missing/);
    const root = await runBerth(['exec', '--session', 'x', '--workspace', '/', '--', 'true'], { env: t.env, cwd: t.dir });
    expect(root.code).toBe(125);
    const etc = await runBerth(['exec', '--session', 'x', '--workspace', '/etc', '--', 'echo should-not-run'], { env: t.env, cwd: t.dir });
    expect(etc).toEqual({
      code: 125, stdout: '',
      stderr: 'berth: attached workspace "/etc" is /etc, a system directory berth never exposes to a sandbox; attach a project folder instead\n',
    });
  });

  it('a backend that cannot be reached is a clear error, never a fallback to the host', async () => {
    // An ssh host where nothing listens (port 1 on loopback), with a real key and an empty known_hosts.
    const keys = realpathSync(mkdtempSync(join(tmpdir(), 'berth-ssh-key-')));
    try {
      writeFileSync(join(keys, 'id'), utils.generateKeyPairSync('ed25519').private, { mode: 0o600 });
      using t = tempInstall(`backend: ssh\nssh:\n  host: 127.0.0.1\n  port: 1\n  identityFile: ${keys}/id\n  knownHosts: ${keys}/known_hosts\n`);
      const marker = `/tmp/berth-should-not-exist-${process.pid}`;
      const r = await runBerth(['exec', '--session', 'x', '--', `echo ran-on-host > ${marker}`], { env: t.env, cwd: t.dir });
      expect(r.code).toBe(125);
      expect(r.stderr).toMatch(/SSH host 127\.0\.0\.1:1 as root: connection refused/);
      expect(existsSync(marker)).toBe(false);
      const explained = await runBerth(['explain', '--session', 'x'], { env: t.env, cwd: t.dir });
      expect(explained.stdout).toMatch(/^host {9}root@127\.0\.0\.1:1$/m);
    } finally {
      rmSync(keys, { recursive: true, force: true });
    }
  });

  it('explain is pure: prints the binding and creates no sandbox', async () => {
    using t = tempInstall(LOCAL);
    const r = await runBerth(['explain', '--session', 'e1', '--json'], { env: t.env, cwd: t.dir });
    expect(r.code).toBe(0);
    const b = JSON.parse(r.stdout) as Record<string, unknown>;
    expect(Object.keys(b).sort()).toEqual([
      'backend', 'cwd', 'egress', 'envMissing', 'envNames', 'isolation', 'kill', 'lifecycle', 'mount', 'mountReason', 'note', 'persistent', 'profile', 'rule', 'sandboxKey', 'tenant',
    ].sort());
    expect(b['lifecycle']).toEqual({ whenIdle: 'removed', afterSeconds: 3600 });
    expect(b).toMatchObject({ backend: 'local', tenant: 'local', profile: 'default', sandboxKey: 'session:e1', rule: 'auto:5', persistent: false, mount: null });
    // The host backend isolates nothing, and explain says so.
    expect(b).toMatchObject({ isolation: 'none', note: expect.stringMatching(/^runs on this host as berth's user, without isolation/) });
    const text = await runBerth(['explain', '--session', 'e1'], { env: t.env, cwd: t.dir });
    expect(text.stdout).toMatch(/^isolation +none\n/m);
    expect(text.stdout).toMatch(/^note +runs on this host as berth's user, without isolation/m);
    expect(text.stdout).toMatch(/^lifecycle +removed after 3600 s idle\n/m);
    // No egress section: open, no proxy, no credentials.
    expect(text.stdout).toMatch(/^egress +open\negressProxy +no\n$/m);
    expect(existsSync(join(t.home, 'sandboxes'))).toBe(false);
  });

  it('BERTH_SESSION in the env is the session when no flag is given', async () => {
    using t = tempInstall(LOCAL);
    const r = await runBerth(['explain', '--json'], { env: { ...t.env, BERTH_SESSION: 'from-env' }, cwd: t.dir });
    expect(JSON.parse(r.stdout)).toMatchObject({ sandboxKey: 'session:from-env' });
    const flag = await runBerth(['explain', '--json', '--session', 'flag'], { env: { ...t.env, BERTH_SESSION: 'from-env' }, cwd: t.dir });
    expect(JSON.parse(flag.stdout)).toMatchObject({ sandboxKey: 'session:flag' });
  });

  it('close removes the session\'s ephemeral sandbox dir; ls shows what exists', async () => {
    using t = tempInstall(LOCAL);
    await runBerth(['exec', '--session', 'gone', '--', 'touch f'], { env: t.env, cwd: t.dir });
    const ls = await runBerth(['ls', '--json'], { env: t.env, cwd: t.dir });
    const list = JSON.parse(ls.stdout) as { sandboxKey: string; sessions: { session: string; open: boolean }[] }[];
    expect(list.map((s) => s.sandboxKey)).toEqual(['session:gone']);
    expect(list[0]!.sessions).toEqual([{ session: 'gone', open: true }]);
    const dirs = readdirSync(join(t.home, 'sandboxes', 'local'));
    expect(dirs).toHaveLength(1);
    const close = await runBerth(['close', '--session', 'gone'], { env: t.env, cwd: t.dir });
    expect(close.code).toBe(0);
    expect(close.stdout).toMatch(/removed: session:gone/);
    expect(readdirSync(join(t.home, 'sandboxes', 'local'))).toEqual([]);
    const after = await runBerth(['ls', '--json'], { env: t.env, cwd: t.dir });
    expect(JSON.parse(after.stdout)).toEqual([]);
  });

  it('ls --all-tenants lists every tenant\'s sandboxes with a TENANT column; plain ls shows tenant local only', async () => {
    using t = tempInstall(LOCAL);
    for (const tenant of ['local', 'acme']) {
      expect((await runBerth(['exec', '--tenant', tenant, '--session', `s-${tenant}`, '--', 'true'], { env: t.env, cwd: t.dir })).code).toBe(0);
    }
    const all = await runBerth(['ls', '--all-tenants'], { env: t.env, cwd: t.dir });
    expect(all.code).toBe(0);
    const lines = all.stdout.trimEnd().split('\n');
    expect(lines[0]).toMatch(/^TENANT +KEY +BACKEND +LIFECYCLE +RULE +SESSIONS$/);
    expect(lines.slice(1).map((l) => l.split(/ +/).slice(0, 2)).sort()).toEqual([['acme', 'session:s-acme'], ['local', 'session:s-local']]);
    const json = JSON.parse((await runBerth(['ls', '--all-tenants', '--json'], { env: t.env, cwd: t.dir })).stdout) as { tenant: string }[];
    expect(json.map((s) => s.tenant).sort()).toEqual(['acme', 'local']);
    const plain = await runBerth(['ls'], { env: t.env, cwd: t.dir });
    expect(plain.stdout).not.toMatch(/TENANT|acme/);
    expect(plain.stdout).toMatch(/^session:s-local /m);
    const both = await runBerth(['ls', '--tenant', 'acme', '--all-tenants'], { env: t.env, cwd: t.dir });
    expect(both).toEqual({ code: 2, stdout: '', stderr: 'berth: --tenant and --all-tenants contradict each other: give one of them\n' });
    for (const tenant of ['local', 'acme']) await runBerth(['close', '--tenant', tenant, '--session', `s-${tenant}`], { env: t.env, cwd: t.dir });
  });

  it('an unknown command, even one named like an Object property, is a usage error (exit 2)', async () => {
    for (const name of ['constructor', 'toString', '__proto__', 'nope']) {
      const r = await runBerth([name]);
      expect(r.code, name).toBe(2);
      expect(r.stderr).toBe(`berth: unknown command "${name}"; run "berth --help" for the list\n`);
    }
  });
});
