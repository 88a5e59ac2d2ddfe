import { spawn } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { BOOTSTRAP_SCRIPT, CWD_MISSING_EXIT, planSpawn, PRELUDE_INCOMPLETE_EXIT, type SpawnRequest } from '../../src/backends/kubernetes/spawn-prelude.js';
import { ConfigError } from '../../src/errors.js';

/*
 * The bootstrap runs here under real shells (dash, bash, busybox ash: the /bin/sh of common
 * images) fed through a pipe, as the exec API feeds it.
 */

const SHELLS: [string, string[]][] = [
  ['dash', ['/usr/bin/dash']],
  ['bash', ['/usr/bin/bash']],
  ['busybox ash', ['/usr/bin/busybox', 'sh']],
];

interface Run { code: number | null; stdout: string; stderr: string }

function run(shell: string[], req: SpawnRequest, after: Buffer | string = '', end = true): Promise<Run> {
  const plan = planSpawn(req);
  // The plan's command starts with /bin/sh: swap in the shell under test, keep the rest.
  const [, ...rest] = plan.command;
  // HOME without a .bashrc: node's stdio pipes are sockets, and bash sources ~/.bashrc when stdin is a socket (rshd heuristic).
  const env = { PATH: process.env['PATH'] ?? '/usr/bin:/bin', HOME: '/nonexistent' };
  const child = spawn(shell[0] as string, [...shell.slice(1), ...rest], { stdio: ['pipe', 'pipe', 'pipe'], env });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
  child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
  // A command that reads nothing (mode n) may exit before the bytes after the prelude are
  // written: that EPIPE is expected, not a failure of the test.
  child.stdin.on('error', () => undefined);
  child.stdin.write(plan.prelude);
  child.stdin.write(after);
  if (end) child.stdin.end();
  // A shell missing here (busybox-static not installed: .ci/run installs it) fails at once, naming it.
  return new Promise((resolve, reject) => {
    child.on('error', (err) => reject(new Error(`${shell.join(' ')}: ${err.message}${shell[0]?.endsWith('busybox') === true ? ' (apt-get install -y busybox-static)' : ''}`)));
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

const HOSTILE = {
  NEWLINES: 'line one\nline two\n\n',
  QUOTES: `it's "quoted" \\ $HOME \`id\` $(id) ;exit 9`,
  UNICODE: 'ünïcødé ✓',
  LOOKS_LIKE_END: '--berth-end-000000000000000000000000',
  EMPTY: '',
};

describe('kubernetes spawn prelude', () => {
  for (const [name, shell] of SHELLS) {
    describe(name, () => {
      it('delivers every env value exactly, however hostile, without running any of it', async () => {
        const r = await run(shell, { argv: ['/usr/bin/env'], env: HOSTILE, stdin: false });
        expect(r.stderr).toBe('');
        expect(r.code).toBe(0);
        for (const [k, v] of Object.entries(HOSTILE)) expect(r.stdout).toContain(`${k}=${v}\n`);
      });

      it('leaves the rest of stdin, byte for byte, to the command', async () => {
        const payload = Buffer.from([0, 1, 2, 255, 10, 13, 10, ...Buffer.from('tail\nwithout newline')]);
        const r = await run(shell, { argv: ['/usr/bin/od', '-An', '-tx1', '-v'], env: { A: 'x' }, stdin: true }, payload);
        expect(r.code).toBe(0);
        expect(r.stdout.replace(/\s+/g, '')).toBe(payload.toString('hex'));
      });

      it('mode n gives the command /dev/null even when more bytes follow', async () => {
        const r = await run(shell, { argv: ['/usr/bin/wc', '-c'], env: {}, stdin: false }, 'not for you\n');
        expect(r.stdout.trim()).toBe('0');
      });

      it('starts in the cwd, and refuses to run anything when it is missing', async () => {
        expect((await run(shell, { argv: ['/usr/bin/pwd'], env: {}, cwd: '/usr/share', stdin: false })).stdout).toBe('/usr/share\n');
        const missing = await run(shell, { argv: ['/usr/bin/echo', 'ran'], env: {}, cwd: '/no/such dir', stdin: false });
        expect(missing.code).toBe(CWD_MISSING_EXIT);
        expect(missing.stdout).toBe('');
        expect(missing.stderr).toContain('cannot enter working directory /no/such dir');
      });

      it('runs nothing when the stream ends before the end token', async () => {
        const plan = planSpawn({ argv: ['/usr/bin/echo', 'ran'], env: { A: 'x' }, stdin: true });
        const [, ...rest] = plan.command;
        const child = spawn(shell[0] as string, [...shell.slice(1), ...rest], { stdio: ['pipe', 'pipe', 'pipe'] });
        let out = '';
        child.stdout.on('data', (c: Buffer) => (out += c.toString()));
        child.stdin.end(plan.prelude.subarray(0, plan.prelude.length - 5));
        const code = await new Promise((resolve) => child.on('close', resolve));
        expect(code).toBe(PRELUDE_INCOMPLETE_EXIT);
        expect(out).toBe('');
      });

      it('the command keeps the pid and has the values in its own environ, none on any cmdline', async () => {
        // The command reads its own /proc entries: environ has the secret, cmdline has not.
        const secret = 'S3CRET-value-9f8e7d';
        const script = 'tr "\\000" "\\n" < /proc/$$/environ | grep -c "^TOKEN=S3CRET"; tr "\\000" " " < /proc/$$/cmdline';
        const r = await run(shell, { argv: ['/usr/bin/dash', '-c', script], env: { TOKEN: secret }, stdin: false });
        expect(r.stdout.split('\n')[0]).toBe('1');
        expect(r.stdout).not.toContain(secret);
      });
    });
  }

  it('the exec command never carries a value, only the bootstrap, a mode, the end token and argv', () => {
    const plan = planSpawn({ argv: ['bash', '--noprofile', '--norc'], env: { API_KEY: 'sk-verysecret' }, cwd: '/workspace', stdin: true });
    expect(plan.command.slice(0, 5)).toEqual(['/bin/sh', '-c', BOOTSTRAP_SCRIPT, 'berth-spawn', 'p']);
    expect(plan.command[5]).toMatch(/^--berth-end-[0-9a-f]{24}$/);
    expect(plan.command.slice(6)).toEqual(['bash', '--noprofile', '--norc']);
    expect(plan.command.join(' ')).not.toContain('sk-verysecret');
    expect(plan.prelude.toString()).toContain("export API_KEY='sk-verysecret'");
  });

  it('picks another end token when a value holds a line equal to it', () => {
    const tokens = ['--tok-a', '--tok-a', '--tok-b'];
    const plan = planSpawn({ argv: ['true'], env: { V: 'x\n--tok-a\ny' }, stdin: false }, () => tokens.shift() as string);
    expect(plan.command[5]).toBe('--tok-b');
  });

  it('refuses names and values no environment can hold', () => {
    expect(() => planSpawn({ argv: ['true'], env: { 'BAD-NAME': 'x' }, stdin: false })).toThrow(ConfigError);
    expect(() => planSpawn({ argv: ['true'], env: { OK: 'a\0b' }, stdin: false })).toThrow(/NUL byte/);
  });
});
