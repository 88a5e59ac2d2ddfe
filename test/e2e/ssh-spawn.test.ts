import { randomBytes } from 'node:crypto';
import { afterEach, expect, it } from 'vitest';
import type { RemoteAccount } from '../../src/backends/ssh/accounts.js';
import { ConnectionLostError } from '../../src/backends/ssh/errors.js';
import { inSandboxNamespaces } from '../../src/backends/ssh/namespaces.js';
import { remoteRunner } from '../../src/backends/ssh/remote-exec.js';
import { spawnAs, type RemoteExit, type RemoteProcess } from '../../src/backends/ssh/spawn.js';
import { BerthError, SandboxNotFoundError } from '../../src/errors.js';
import { waitFor } from '../helpers/docker-e2e.js';
import { describeSsh, SshFixture } from '../helpers/sshd.js';

let fx: SshFixture | undefined;
afterEach(async () => {
  await fx?.cleanup();
  fx = undefined;
}, 60_000);

function fixture(): SshFixture {
  fx = new SshFixture();
  return fx;
}

function collect(p: RemoteProcess): Promise<{ out: string; err: string; exit: RemoteExit }> {
  let out = '';
  let err = '';
  p.stdout.on('data', (c: Buffer) => (out += c.toString()));
  p.stderr.on('data', (c: Buffer) => (err += c.toString()));
  const ended = (r: NodeJS.ReadableStream): Promise<unknown> => new Promise((resolve) => r.once('end', resolve));
  return Promise.all([p.exited, ended(p.stdout), ended(p.stderr)]).then(([exit]) => ({ out, err, exit }));
}

/** Resolves with stdout once it contains `text`. */
function until(p: RemoteProcess, text: string): Promise<string> {
  return new Promise((resolve, reject) => {
    let out = '';
    const on = (c: Buffer): void => {
      out += c.toString();
      if (out.includes(text)) {
        p.stdout.off('data', on);
        resolve(out);
      }
    };
    p.stdout.on('data', on);
    void p.exited.then((x) => reject(new Error(`ended (${JSON.stringify(x)}) before printing ${text}; got ${JSON.stringify(out)}`)));
  });
}

/** Live (not zombie) processes of a uid, as root on the host sees them: `pid args` lines. */
async function processesOf(f: SshFixture, uid: number): Promise<string[]> {
  const r = await remoteRunner(f.pool, f.target)(
    'u=$1; for d in /proc/[0-9]*; do { read -r l < "$d/stat"; r=${l##*) }; set -- $r; [ "$1" = Z ] && continue; ' +
      'while read -r k v _; do [ "$k" = Uid: ] && { [ "$v" = "$u" ] && printf "%s %s\\n" "${d#/proc/}" "$(tr "\\0" " " < "$d/cmdline")"; break; }; done < "$d/status"; } 2>/dev/null; done',
    [String(uid)],
  );
  return r.stdout.split('\n').filter((l) => l !== '');
}

async function bash(f: SshFixture, acct: RemoteAccount, script: string, env: Record<string, string> = {}): Promise<RemoteProcess> {
  return spawnAs(f.spawnContext, acct.name, ['/bin/bash', '--noprofile', '--norc', '-c', script], { env, cwd: acct.workspace });
}

describeSsh('spawn as a sandbox account over one channel (real sshd)', () => {
  it('runs the argv as the account, in its cwd, with the env it was given and nothing of the login session', async () => {
    const f = fixture();
    const acct = await f.account();
    const p = await bash(f, acct, 'id -u; id -G; pwd; env; echo to-stderr > /dev/stderr', { GREETING: 'hello there', PATH: '/usr/bin:/bin' });
    const r = await collect(p);
    expect(r.exit).toEqual({ code: 0, signal: null });
    // The channel's pipes are the account's: it may reopen them as programs often do.
    expect(r.err).toBe('to-stderr\n');
    const [uid, groups, pwd, ...env] = r.out.trim().split('\n');
    expect(Number(uid)).toBe(acct.uid);
    expect(groups).toBe(String(acct.gid));
    expect(pwd).toBe(acct.workspace);
    expect(env).toContain('GREETING=hello there');
    expect(env).toContain(`HOME=${acct.home}`);
    expect(env).toContain(`TMPDIR=${acct.tmp}`);
    expect(env.filter((l) => /^(SSH_|MAIL=|OLDPWD=)/.test(l))).toEqual([]);
  });

  it('keeps env values off every argv on the host while the command runs (ps and /proc/*/cmdline as root)', async () => {
    const f = fixture();
    const acct = await f.account();
    const secret = `s3cret-${randomBytes(12).toString('hex')}`;
    const p = await bash(f, acct, 'echo started; exec sleep 60', { API_TOKEN: secret });
    await until(p, 'started');
    const run = remoteRunner(f.pool, f.target);
    const ps = await run('ps -eo pid,args; for f in /proc/[0-9]*/cmdline; do tr "\\0" " " < "$f" 2>/dev/null; echo; done', []);
    expect(ps.stdout).toContain('sleep 60');
    expect(ps.stdout).not.toContain(secret);
    // The value did arrive, in the process's environment (readable by root and the account only);
    // its pid is the sandbox's PID namespace's.
    const environ = await run(inSandboxNamespaces('tr "\\0" "\\n" < /proc/$2/environ', 'exit 1'), [acct.name, String(p.pid)]);
    expect(environ.stdout).toContain(`API_TOKEN=${secret}`);
    await p.kill();
  });

  it('kill ends the whole remote tree: background children, orphans, and children that started their own session (also orphaned)', async () => {
    const f = fixture();
    const acct = await f.account();
    const p = await bash(f, acct, 'sleep 1000 & sleep 1001 & setsid sleep 1002 & (sleep 1003 &) ; (setsid sleep 1004 &); echo ready; wait');
    await until(p, 'ready');
    expect(await waitFor(async () => (await processesOf(f, acct.uid)).filter((l) => /^[0-9]+ sleep 100[0-4] $/.test(l)).length === 5, 10_000)).toBe(true);
    await p.kill();
    expect(await processesOf(f, acct.uid)).toEqual([]);
    expect(await p.exited).toEqual({ code: null, signal: 'SIGKILL' });
  });

  it('closing the channel alone leaves the remote processes running (why kill runs a helper)', async () => {
    const f = fixture();
    const acct = await f.account();
    const p = await bash(f, acct, 'sleep 1000 & echo ready; wait');
    await until(p, 'ready');
    (p.stdin as unknown as { close(): void }).close();
    // sshd answers the close only once the launcher is gone, which here is never.
    expect(await Promise.race([p.exited.then(() => 'closed'), processesOf(f, acct.uid)])).not.toBe('closed');
    expect((await processesOf(f, acct.uid)).some((l) => l.includes('sleep 1000'))).toBe(true);
    await p.kill();
    expect(await processesOf(f, acct.uid)).toEqual([]);
  });

  it('bounds the account\'s processes when asked (RLIMIT_NPROC, counted per uid: per sandbox)', async () => {
    const f = fixture();
    const acct = await f.account();
    const p = await spawnAs({ ...f.spawnContext, maxProcesses: 64 }, acct.name, ['/bin/bash', '-c', 'ulimit -u; ulimit -Hu'], { env: {}, cwd: acct.workspace });
    expect((await collect(p)).out).toBe('64\n64\n');
    await expect(spawnAs({ ...f.spawnContext, maxProcesses: -1 }, acct.name, ['true'], { env: {}, cwd: acct.workspace })).rejects.toThrow(/whole number/);
  });

  it('reports exit codes and signals', async () => {
    const f = fixture();
    const acct = await f.account();
    expect((await collect(await bash(f, acct, 'exit 7'))).exit).toEqual({ code: 7, signal: null });
    expect((await collect(await bash(f, acct, 'kill -TERM $$'))).exit).toEqual({ code: null, signal: 'SIGTERM' });
    // The waiter (root's bash) says nothing of the death on the channel: its "... Killed" line
    // would be noise on the command's stderr, and a write after a kill closed the channel would
    // end the waiter by SIGPIPE instead of the command's signal.
    const killed = await collect(await bash(f, acct, 'kill -KILL $$'));
    expect(killed.exit).toEqual({ code: null, signal: 'SIGKILL' });
    expect(killed.err).toBe('');
  });

  it('reports the exit of a command that was stopped and continued, as the warden does to a shell', async () => {
    const f = fixture();
    const acct = await f.account();
    const p = await bash(f, acct, 'echo ready; kill -STOP $$; echo resumed; exit 3');
    let out = '';
    p.stdout.on('data', (c: Buffer) => (out += c.toString()));
    const cont = inSandboxNamespaces('p=$2; for i in $(seq 100); do read -r l < /proc/$p/stat; set -- ${l##*) }; [ "$1" = T ] && exec kill -CONT "$p"; sleep 0.1; done; exit 1', 'exit 1');
    expect((await remoteRunner(f.pool, f.target)(cont, [acct.name, String(p.pid)])).code).toBe(0);
    expect(await p.exited).toEqual({ code: 3, signal: null });
    expect(await waitFor(async () => out === 'ready\nresumed\n', 5_000)).toBe(true);
  });

  it('carries stdin to the command and its end as EOF, a MiB through and back', async () => {
    const f = fixture();
    const acct = await f.account();
    const p = await spawnAs(f.spawnContext, acct.name, ['/bin/cat'], { env: {}, cwd: acct.workspace });
    const data = randomBytes(1024 * 1024);
    const chunks: Buffer[] = [];
    p.stdout.on('data', (c: Buffer) => chunks.push(c));
    const ended = new Promise((resolve) => p.stdout.once('end', resolve));
    p.stdin.end(data);
    expect(await p.exited).toEqual({ code: 0, signal: null });
    await ended;
    expect(Buffer.concat(chunks).equals(data)).toBe(true);
  });

  it('refuses a cwd the account cannot enter and an account that is gone, running nothing', async () => {
    const f = fixture();
    const a = await f.account();
    const b = await f.account();
    const other = await spawnAs(f.spawnContext, a.name, ['/bin/true'], { env: {}, cwd: b.workspace }).catch((e: unknown) => e);
    expect(other).toBeInstanceOf(BerthError);
    expect((other as Error).message).toContain(`working directory ${b.workspace} does not exist or is not open to this sandbox`);
    await f.accounts.remove(b.name);
    const gone = await spawnAs(f.spawnContext, b.name, ['/bin/true'], { env: {}, cwd: '/' }).catch((e: unknown) => e);
    expect(gone).toBeInstanceOf(SandboxNotFoundError);
  });

  it('reports a lost connection as the exit\'s error, and kill still ends the tree over a new connection', async () => {
    const f = fixture();
    const acct = await f.account();
    const finder = await spawnAs(f.spawnContext, acct.name, ['/bin/bash', '--noprofile', '--norc', '-c', 'echo ready; sleep 1000 & wait'], { env: {}, cwd: acct.workspace });
    await until(finder, 'ready');
    const run = remoteRunner(f.pool, f.target);
    // The sshd process serving this connection: the nearest sshd above the command on the host
    // (the launcher's waiter, outside the sandbox's namespaces, sits between them).
    const found = await run(
      'for d in /proc/[0-9]*; do [ "$(stat -c %u "$d" 2>/dev/null)" = "$1" ] && [ "$(tr "\\0" " " < "$d/cmdline" 2>/dev/null)" = "sleep 1000 " ] && p=${d#/proc/}; done; ' +
        'while [ "${p:-1}" -gt 1 ]; do [ "$(cat "/proc/$p/comm")" = sshd ] && { echo "$p"; exit; }; p=$(ps -o ppid= -p "$p" | tr -d " "); done',
      [String(acct.uid)],
    );
    const sshdPid = Number(found.stdout.trim());
    expect(sshdPid, found.stdout + found.stderr).toBeGreaterThan(1);
    await run('kill -KILL "$1"', [String(sshdPid)]).catch(() => undefined);
    const exit = await finder.exited;
    expect(exit.error).toBeInstanceOf(ConnectionLostError);
    expect((await processesOf(f, acct.uid)).some((l) => l.includes('sleep 1000'))).toBe(true);
    await finder.kill();
    expect(await processesOf(f, acct.uid)).toEqual([]);
  });
});
