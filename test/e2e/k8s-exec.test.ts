import { afterAll, beforeAll, expect, it } from 'vitest';
import { execOnceInPod } from '../../src/backends/kubernetes/exec-once.js';
import { spawnInPod, type ExecTarget, type PodProcess } from '../../src/backends/kubernetes/spawn.js';
import { STATE_DIR } from '../../src/backends/kubernetes/manifests.js';
import { deletePod } from '../../src/backends/kubernetes/pods.js';
import { CWD_MISSING_EXIT } from '../../src/backends/kubernetes/spawn-prelude.js';
import { SandboxNotFoundError, TimeoutError, UnsupportedError } from '../../src/errors.js';
import { PersistentShell } from '../../src/shell/persistent-shell.js';
import { describeStandin, ensureStandinImage } from '../k8s-standin/describe-standin.js';
import { runningPod, sandboxInput, standinClient } from '../k8s-standin/fixtures.js';
import { StandinApiServer } from '../k8s-standin/server.js';

/*
 * Processes in a pod over the pods/exec WebSocket: the real @kubernetes/client-node `Exec`
 * against the stand-in API server, each exec a real `docker exec` in the pod's container.
 */

const SECRET = 'sk-live-7f3a9c1e5b2d8f4a';

function collect(p: PodProcess): { out: () => string; err: () => string } {
  let out = '';
  let err = '';
  p.stdout.on('data', (c: Buffer) => (out += c.toString()));
  p.stderr.on('data', (c: Buffer) => (err += c.toString()));
  return { out: () => out, err: () => err };
}

/** Every process's cmdline in the pod, one per line (read from /proc by a helper). */
async function cmdlines(target: ExecTarget): Promise<string> {
  const r = await execOnceInPod(target, ['/bin/sh', '-c', 'for d in /proc/[0-9]*; do tr "\\000" " " < "$d/cmdline" 2>/dev/null; echo; done']);
  return r.stdout.toString();
}

function shellOn(target: ExecTarget, env: Record<string, string>, opts: { heartbeatMs?: number; secretNames?: string[] } = {}): Promise<PersistentShell> {
  return PersistentShell.start({
    open: (shellEnv) => spawnInPod(target, ['bash', '--noprofile', '--norc'], { env: { ...env, ...shellEnv }, cwd: '/workspace', stdin: true, heartbeatMs: opts.heartbeatMs }),
    execOnce: (argv, o) => execOnceInPod(target, argv, o),
    stateDir: STATE_DIR,
    shellId: 'e2e',
    defaultCwd: '/workspace',
    secretNames: opts.secretNames ?? [],
    spillDir: undefined,
    maxOutputChars: 100_000,
  });
}

describeStandin('kubernetes exec over the WebSocket (stand-in API server, real client)', () => {
  let server: StandinApiServer;
  let target: ExecTarget;

  beforeAll(async () => {
    await ensureStandinImage();
    server = await StandinApiServer.start();
    target = await runningPod(standinClient(server), sandboxInput('inst-exec'));
  });
  afterAll(async () => {
    await server?.stop();
  });

  it('negotiates v5.channel.k8s.io and round-trips stdin to stdout byte for byte, stderr apart', async () => {
    const p = await spawnInPod(target, ['/bin/sh', '-c', 'cat; echo done >&2'], { env: {}, stdin: true });
    expect(p.protocol).toBe('v5.channel.k8s.io');
    const io = collect(p);
    const payload = Buffer.from([0, 1, 2, 0xff, 0x0a, ...Buffer.from('line\n'.repeat(2000))]);
    p.stdin.end(payload);
    expect(await p.ended).toEqual({ kind: 'exited', code: 0 });
    expect(Buffer.from(io.out(), 'latin1').length).toBeGreaterThan(0);
    const raw: Buffer[] = [];
    const q = await spawnInPod(target, ['/bin/sh', '-c', 'od -An -tx1 -v'], { env: {}, stdin: true });
    q.stdout.on('data', (c: Buffer) => raw.push(c));
    q.stdin.end(payload);
    await q.ended;
    expect(Buffer.concat(raw).toString().replace(/\s+/g, '')).toBe(payload.toString('hex'));
    expect(io.err()).toBe('done\n');
  });

  it('exit codes come from the status channel: 0, a code, a signal', async () => {
    expect((await execOnceInPod(target, ['/bin/sh', '-c', 'exit 0'])).exitCode).toBe(0);
    const three = await execOnceInPod(target, ['/bin/sh', '-c', 'echo out; echo err >&2; exit 3']);
    expect(three).toMatchObject({ exitCode: 3 });
    expect(three.stdout.toString()).toBe('out\n');
    expect(three.stderr.toString()).toBe('err\n');
    expect((await execOnceInPod(target, ['/bin/sh', '-c', 'kill -9 $$'])).exitCode).toBe(137);
  });

  it('env and cwd reach the process; a missing cwd runs nothing', async () => {
    const p = await spawnInPod(target, ['/bin/sh', '-c', 'pwd; printf "%s|" "$GREETING"'], { env: { GREETING: "it's\nmultiline" }, cwd: '/tmp', stdin: false });
    const io = collect(p);
    expect(await p.ended).toEqual({ kind: 'exited', code: 0 });
    expect(io.out()).toBe("/tmp\nit's\nmultiline|");
    const q = await spawnInPod(target, ['/bin/sh', '-c', 'echo ran'], { env: {}, cwd: '/nope', stdin: false });
    const qio = collect(q);
    expect(await q.ended).toEqual({ kind: 'exited', code: CWD_MISSING_EXIT });
    expect(qio.out()).toBe('');
    expect(qio.err()).toContain('cannot enter working directory /nope');
  });

  it('a persistent bash over one exec stream runs many commands with its state kept', async () => {
    const before = server.execRequests.length;
    const shell = await shellOn(target, {});
    const execsAtStart = server.execRequests.length;
    expect((await shell.run('cd /tmp && export FOO=bar && greet() { echo "hi $1"; } && alias ll="echo aliased"', { timeoutMs: 10_000 })).exitCode).toBe(0);
    for (let i = 0; i < 30; i++) {
      const r = await shell.run(`greet ${i}; echo "$FOO $PWD"; ll`, { timeoutMs: 10_000 });
      expect(r.stdout).toBe(`hi ${i}\nbar /tmp\naliased\n`);
      expect(r.cwd).toBe('/tmp');
    }
    expect((await shell.run('exit 9', { timeoutMs: 10_000 })).exitCode).toBe(9);
    // One exec for the shell, none per command.
    expect(execsAtStart - before).toBe(1);
    expect(server.execRequests.length - execsAtStart).toBe(1);
    await shell[Symbol.asyncDispose]();
  });

  it('a secret in env is never on any argv in the pod, nor in the exec URL the API server logs', async () => {
    const shell = await shellOn(target, { API_TOKEN: SECRET }, { secretNames: ['API_TOKEN'] });
    const r = await shell.run('echo "${#API_TOKEN}"; sleep 2 & cat /proc/$$/environ | tr "\\000" "\\n" | grep -c "^API_TOKEN="', { timeoutMs: 10_000 });
    expect(r.stdout).toBe(`${SECRET.length}\n1\n`);
    const lines = await cmdlines(target);
    expect(lines).toContain('bash --noprofile --norc');
    expect(lines).toContain('sleep 2');
    expect(lines).not.toContain(SECRET);
    expect(server.execRequests.join('\n')).not.toContain(SECRET);
    expect(server.execRequests.join('\n')).not.toContain(encodeURIComponent(SECRET));
    await shell[Symbol.asyncDispose]();
  });

  it('kill ends the whole remote tree, detached children included', async () => {
    const p = await spawnInPod(target, ['/bin/sh', '-c', 'sleep 1001 & setsid sleep 1002 & (sleep 1003 &); sleep 1004'], { env: {}, stdin: false });
    for (let i = 0; i < 100 && !(await cmdlines(target)).includes('sleep 1004'); i++) await new Promise((r) => setTimeout(r, 50));
    const before = await cmdlines(target);
    for (const n of [1001, 1002, 1003, 1004]) expect(before).toContain(`sleep ${n}`);
    await p.kill();
    // Killed by its tag (exit 137 reported before the connection is cut) or cut first: never a normal end.
    expect([{ kind: 'exited', code: 137 }, { kind: 'dropped', reason: 'the connection closed without an exit status' }]).toContainEqual(await p.ended);
    const after = await cmdlines(target);
    for (const n of [1001, 1002, 1003, 1004]) expect(after).not.toContain(`sleep ${n}`);
  });

  it('a helper that runs too long or prints too much is stopped and leaves nothing behind', async () => {
    await expect(execOnceInPod(target, ['/bin/sh', '-c', 'sleep 1005'], { timeoutMs: 300 })).rejects.toThrow(TimeoutError);
    await expect(execOnceInPod(target, ['/bin/sh', '-c', 'while :; do echo flood; done'], { maxOutputBytes: 10_000 })).rejects.toThrow(/printed more than 10000 bytes/);
    const after = await cmdlines(target);
    expect(after).not.toContain('sleep 1005');
    expect(after).not.toContain('while :');
  });

  it('a connection cut without a status is noticed at once', async () => {
    const p = await spawnInPod(target, ['/bin/sh', '-c', 'sleep 1006'], { env: {}, stdin: false });
    server.dropExecConnections();
    expect(await p.ended).toEqual({ kind: 'dropped', reason: 'the connection closed without an exit status' });
    await p.kill();
  });

  it('a connection that silently stops answering is cut by the heartbeat (the client sends no pings)', async () => {
    const p = await spawnInPod(target, ['/bin/sh', '-c', 'sleep 1007'], { env: {}, stdin: false, heartbeatMs: 200 });
    server.freezeExecConnections();
    const end = await p.ended;
    expect(end.kind).toBe('dropped');
    expect(end.kind === 'dropped' && end.reason).toMatch(/no answer \(data or pong\) within 200 ms/);
    await p.kill();
  });

  it('a persistent shell whose stream was dropped is replaced, with its cwd and exports restored', async () => {
    const shell = await shellOn(target, {}, { heartbeatMs: 500 });
    await shell.run('cd /tmp && export KEPT=yes', { timeoutMs: 10_000 });
    expect(shell.hasShell).toBe(true);
    server.dropExecConnections();
    for (let i = 0; i < 100 && shell.hasShell; i++) await new Promise((r) => setTimeout(r, 20));
    expect(shell.hasShell).toBe(false);
    const r = await shell.run('echo "$KEPT $PWD"', { timeoutMs: 10_000 });
    expect(r.shellReplaced).toBe(true);
    expect(r.stdout).toBe('yes /tmp\n');
    await shell[Symbol.asyncDispose]();
  });

  it('a hostile command cannot replace the /bin/sh that the bootstrap and the killer run: non-root, no capabilities, read-only root', async () => {
    const r = await execOnceInPod(target, ['/bin/sh', '-c', 'id -u; grep -E "^(CapEff|NoNewPrivs):" /proc/self/status | tr -s "\t " " "; echo x > /bin/sh; echo "write=$?"; cp /bin/sh /tmp/sh && echo copied']);
    const out = r.stdout.toString();
    expect(out).toContain('1000\n');
    expect(out).toContain('CapEff: 0000000000000000');
    expect(out).toContain('NoNewPrivs: 1');
    expect(out).toMatch(/write=[1-9]/);
    expect(r.stderr.toString()).toMatch(/Read-only file system|Permission denied/);
  });

  it('a close signal sent by the server cannot end berth\'s own stdout or stderr (the client would end its default streams)', async () => {
    const p = await spawnInPod(target, ['/bin/sh', '-c', 'read x; echo "got $x"'], { env: {}, stdin: true });
    const io = collect(p);
    server.sendToExecClients(Buffer.from([255, 1]));
    server.sendToExecClients(Buffer.from([255, 2]));
    p.stdin.write('line\n');
    expect(await p.ended).toEqual({ kind: 'exited', code: 0 });
    expect(io.out()).toBe('got line\n');
    expect(process.stdout.writableEnded).toBe(false);
    expect(process.stderr.writableEnded).toBe(false);
  });

  it('an exec into a pod that does not exist is a SandboxNotFoundError', async () => {
    await expect(spawnInPod({ ...target, pod: 'berth-no-such-pod' }, ['true'], { env: {}, stdin: false })).rejects.toThrow(SandboxNotFoundError);
  });
});

describeStandin('kubernetes exec against an API server that offers only v4.channel.k8s.io', () => {
  let server: StandinApiServer;
  let target: ExecTarget;

  beforeAll(async () => {
    await ensureStandinImage();
    server = await StandinApiServer.start({ protocols: ['v4.channel.k8s.io'] });
    target = await runningPod(standinClient(server), sandboxInput('inst-v4'));
  });
  afterAll(async () => {
    if (target !== undefined) await deletePod(target.client, target.pod).catch(() => undefined);
    await server?.stop();
  });

  it('exit codes still come from the status channel', async () => {
    const p = await spawnInPod(target, ['/bin/sh', '-c', 'exit 5'], { env: {}, stdin: false });
    expect(p.protocol).toBe('v4.channel.k8s.io');
    expect(await p.ended).toEqual({ kind: 'exited', code: 5 });
  });

  it('closing stdin alone is impossible on v4: an UnsupportedError that names v5, not a silent hang', async () => {
    const p = await spawnInPod(target, ['/bin/sh', '-c', 'cat'], { env: {}, stdin: true });
    const failed = new Promise<Error>((resolve) => p.stdin.once('error', resolve));
    p.stdin.end('data');
    const err = await failed;
    expect(err).toBeInstanceOf(UnsupportedError);
    expect(err.message).toMatch(/needs v5\.channel\.k8s\.io \(Kubernetes 1\.30 or later\)/);
    await p.kill();
  });
});
