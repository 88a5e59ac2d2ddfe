import { spawn } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { accountName, isAccountName } from '../../src/backends/ssh/account-name.js';
import { parseProbe, probeProblem, RemoteAccounts } from '../../src/backends/ssh/accounts.js';
import { RemoteHostError } from '../../src/backends/ssh/errors.js';
import { encodeSpawnRequest, SPAWN_READY, STAGE2_SCRIPT } from '../../src/backends/ssh/launcher.js';
import { ConfigError, UsageError } from '../../src/errors.js';
import { tempDir } from '../helpers/temp-dir.js';

/** Runs stage 2 of the launcher with local bash (as this user), feeding `stdin`; returns what it printed. */
function stage2(home: string, stdin: Buffer): Promise<{ code: number | null; out: string; err: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn('/bin/bash', ['--noprofile', '--norc', '-c', STAGE2_SCRIPT, 'berth-sandbox', 'berth-0123456789abcdef01234567', home], {
      env: {},
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    child.stdout.on('data', (c: Buffer) => (out += c.toString()));
    child.stderr.on('data', (c: Buffer) => (err += c.toString()));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, out, err }));
    child.stdin.end(stdin);
  });
}

describe('the spawn request and the launcher\'s second stage', () => {
  it('delivers env values with newlines, quotes and unicode intact, reads exactly the request and leaves the rest on stdin', async () => {
    const home = tempDir('berth-stage2-');
    const cwd = join(home, 'workspace');
    mkdirSync(cwd);
    const env = { TRICKY: `a\nb 'c' "d" $(e) \`f\` ü\t`, EMPTY: '', PATH: '/usr/bin:/bin' };
    const request = encodeSpawnRequest({ cwd, tag: 'tag123', env, argv: ['/bin/bash', '-c', 'printf "%s|" "$TRICKY" "$EMPTY" "$BERTH_SPAWN_TAG" "$HOME" "$TMPDIR" "$PWD" "${OLDPWD-unset}" "$1"; cat', 'arg0', 'the arg'] });
    const r = await stage2(home, Buffer.concat([request, Buffer.from('rest of stdin\0binary\n')]));
    expect(r.err).toBe('');
    expect(r.code).toBe(0);
    const [ready, ...body] = r.out.split('\n');
    expect(ready).toMatch(new RegExp(`^${SPAWN_READY} [0-9]+$`));
    expect(body.join('\n')).toBe(`${env.TRICKY}||tag123|${home}|${home}/tmp|${cwd}|unset|the arg|rest of stdin\0binary\n`);
  });

  it('gives the command only the environment it was sent (plus its defaults)', async () => {
    const home = tempDir('berth-stage2-');
    const request = encodeSpawnRequest({ cwd: home, tag: 't', env: { ONLY: '1' }, argv: ['/usr/bin/env'] });
    const r = await stage2(home, request);
    const names = r.out.split('\n').slice(1).filter((l) => l !== '').map((l) => l.slice(0, l.indexOf('='))).sort();
    expect(names).toEqual(['BERTH_SPAWN_TAG', 'HOME', 'LOGNAME', 'ONLY', 'PATH', 'PWD', 'SHELL', 'SHLVL', 'TMPDIR', 'USER']);
  });

  it('refuses a missing working directory with one E line and exit 125, running nothing', async () => {
    const home = tempDir('berth-stage2-');
    const request = encodeSpawnRequest({ cwd: join(home, 'nope'), tag: 't', env: {}, argv: ['/bin/touch', join(home, 'ran')] });
    const r = await stage2(home, request);
    expect(r.code).toBe(125);
    expect(r.out).toBe(`E working directory ${join(home, 'nope')} does not exist or is not open to this sandbox\n`);
  });

  it('refuses a truncated request', async () => {
    const home = tempDir('berth-stage2-');
    const request = encodeSpawnRequest({ cwd: home, tag: 't', env: { A: '1' }, argv: ['/bin/true'] });
    const r = await stage2(home, request.subarray(0, request.length - 3));
    expect(r.code).toBe(125);
    expect(r.out).toBe('E the spawn request ended early\n');
  });

  it('refuses env names of its own (or the spawn tag), so a pair cannot change the argv, cwd or tag', async () => {
    const home = tempDir('berth-stage2-');
    for (const name of ['__bl_a', 'BERTH_SPAWN_TAG']) {
      expect(() => encodeSpawnRequest({ cwd: home, tag: 't', env: { [name]: 'x' }, argv: ['/bin/true'] })).toThrow(/reserved/);
      // Stage 2 refuses them too, whoever wrote the request.
      const raw = Buffer.from(['berth-spawn-1', home, 't', '1', `${name}=/bin/false`, '1', '/usr/bin/env', ''].join('\0'));
      const r = await stage2(home, raw);
      expect(r.code).toBe(125);
      expect(r.out).toBe('E bad environment entry 0\n');
    }
  });

  it('refuses what cannot travel intact before anything is sent', () => {
    const ok = { cwd: '/w', tag: 't', env: {}, argv: ['true'] };
    expect(() => encodeSpawnRequest({ ...ok, argv: [] })).toThrow(UsageError);
    expect(() => encodeSpawnRequest({ ...ok, cwd: 'relative' })).toThrow(/absolute/);
    expect(() => encodeSpawnRequest({ ...ok, env: { 'BAD-NAME': 'x' } })).toThrow(/not a valid shell variable name/);
    expect(() => encodeSpawnRequest({ ...ok, env: { A: 'x\0y' } })).toThrow(/NUL/);
    expect(() => encodeSpawnRequest({ ...ok, argv: ['a\0b'] })).toThrow(/NUL/);
  });
});

describe('sandbox account names', () => {
  it('are berth- and 24 hex digits of the identity digest, within useradd\'s 32 characters', () => {
    const name = accountName('ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef0123456789');
    expect(name).toBe('berth-abcdef0123456789abcdef01');
    expect(name.length).toBeLessThanOrEqual(32);
    expect(isAccountName(name)).toBe(true);
    expect(isAccountName('root')).toBe(false);
    expect(isAccountName(`${name}0`)).toBe(false);
    expect(() => accountName('not-hex')).toThrow(UsageError);
  });
});

describe('judging what the host offers', () => {
  const where = { endpoint: 'build1:22', user: 'ana' };

  it('refuses a login that is not root, saying sudo is not supported', () => {
    const p = probeProblem(parseProbe('uid 1000\nbash 5.2\n'), where);
    expect(p).toBeInstanceOf(RemoteHostError);
    expect(p?.message).toContain('"ana" is uid 1000');
    expect(p?.message).toContain('Passwordless sudo is not supported');
  });

  it('names each missing tool with the package that brings it', () => {
    const p = probeProblem(parseProbe('uid 0\nbash 5.1\nmissing useradd\nmissing setpriv-nnp\n'), where);
    expect(p?.message).toContain('useradd (passwd (Debian/Ubuntu) or shadow-utils (RHEL))');
    expect(p?.message).toContain('setpriv-nnp (util-linux >= 2.32');
  });

  it('names what the sandboxes\' namespaces need: the util-linux tools and a kernel that lets root make them', () => {
    const p = probeProblem(parseProbe('uid 0\nbash 5.2\nmissing nsenter-no-fork\nmissing flock\nmissing namespaces\n'), where);
    expect(p).toBeInstanceOf(RemoteHostError);
    expect(p?.message).toContain('nsenter-no-fork (a newer util-linux (its nsenter lacks --no-fork))');
    expect(p?.message).toContain('flock (util-linux)');
    expect(p?.message).toContain('namespaces (a kernel that lets root make the PID, IPC and mount namespaces each sandbox runs in');
    expect(p?.message).toContain('needs CAP_SYS_ADMIN');
  });

  it('refuses a host without cgroup2 and cgroup.kill, naming what a command\'s group needs', () => {
    const p = probeProblem(parseProbe('uid 0\nbash 5.2\nmissing cgroups\n'), where);
    expect(p).toBeInstanceOf(RemoteHostError);
    expect(p?.message).toContain('cgroups (cgroup v2 with cgroup.kill and cgroup.freeze (Linux >= 5.14');
    expect(p?.message).toContain('never runs sandboxes on it in a weaker mode');
  });

  it('refuses bash older than 4.4 and accepts a fit host', () => {
    expect(probeProblem(parseProbe('uid 0\nbash 4.3\n'), where)?.message).toContain('bash 4.3');
    expect(probeProblem(parseProbe('uid 0\nbash 4.4\n'), where)).toBeUndefined();
  });

  it('refuses a home root that is relative, / or not normalized', () => {
    const run = async () => ({ code: 0, signal: undefined, stdout: '', stderr: '' });
    for (const homeRoot of ['home/berth', '/', '/home/../etc', '/home/berth/', '/home/b erth']) {
      expect(() => new RemoteAccounts(run, { endpoint: 'h:22', user: 'root', homeRoot })).toThrow(ConfigError);
    }
  });
});
