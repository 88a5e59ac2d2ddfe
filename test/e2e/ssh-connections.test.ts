import { execFileSync, spawn } from 'node:child_process';
import { existsSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import type { ClientChannel } from 'ssh2';
import { afterEach, expect, it } from 'vitest';
import { SshConnectionPool } from '../../src/backends/ssh/connections.js';
import { ConnectionLostError } from '../../src/backends/ssh/errors.js';
import { remoteRunner } from '../../src/backends/ssh/remote-exec.js';
import { BackendUnavailableError, BerthError } from '../../src/errors.js';
import { waitFor } from '../helpers/docker-e2e.js';
import { describeSsh, sshTarget } from '../helpers/sshd.js';
import { tempDir } from '../helpers/temp-dir.js';

/** Collects a channel's stdout until it closes; resolves with the text and the exit code. */
function collect(channel: ClientChannel): Promise<{ out: string; code: number | null }> {
  const chunks: Buffer[] = [];
  let code: number | null = null;
  channel.on('data', (c: Buffer) => chunks.push(c));
  channel.stderr.resume();
  channel.once('exit', (c: number | null) => {
    code = c;
  });
  return new Promise((resolve) => channel.once('close', () => resolve({ out: Buffer.concat(chunks).toString(), code })));
}

/** Reads the first line a channel prints. */
function firstLine(channel: ClientChannel): Promise<string> {
  return new Promise((resolve, reject) => {
    let text = '';
    const onData = (c: Buffer): void => {
      text += c.toString();
      const nl = text.indexOf('\n');
      if (nl >= 0) {
        channel.off('data', onData);
        resolve(text.slice(0, nl));
      }
    };
    channel.on('data', onData);
    channel.once('close', () => reject(new Error(`channel closed before a line; got ${JSON.stringify(text)}`)));
  });
}

/** Remote processes a test left running (killed in afterEach by pid, never by name). */
const leftovers: number[] = [];
afterEach(() => {
  for (const pid of leftovers.splice(0)) {
    for (const sig of ['CONT', 'KILL'] as const) {
      try {
        process.kill(pid, `SIG${sig}`);
      } catch {
        // Already gone.
      }
    }
  }
});

describeSsh('ssh connection pool against a real sshd (MaxSessions 10)', () => {
  it('carries 25 channels open at the same time over connections of at most 10, and all answer', async () => {
    await using pool = new SshConnectionPool();
    const target = sshTarget();
    // Each command waits for a line on stdin, so all 25 are open together before any ends.
    const opened = await Promise.all(
      Array.from({ length: 25 }, (_, i) => pool.exec(target, `read -r go; echo "$go ${i}"`)),
    );
    const conns = pool.connectionsOf(target);
    expect(conns.reduce((n, c) => n + c.channels, 0)).toBe(25);
    expect(conns.every((c) => c.channels <= 10)).toBe(true);
    expect(conns).toHaveLength(3);
    // Opened before the server's limit, not after a refusal.
    expect(pool.refusedChannels).toBe(0);
    const results = opened.map(({ channel }) => collect(channel));
    for (const { channel } of opened) channel.end('go\n');
    const outs = await Promise.all(results);
    expect(outs.map((r) => r.out)).toEqual(Array.from({ length: 25 }, (_, i) => `go ${i}\n`));
    expect(outs.every((r) => r.code === 0)).toBe(true);
  });

  it('takes a server that refuses a channel at its word and opens another connection (maxSessions set above the server\'s 10)', async () => {
    await using pool = new SshConnectionPool({ maxSessions: 20 });
    const target = sshTarget();
    const opened = await Promise.all(Array.from({ length: 25 }, () => pool.exec(target, 'read -r x; echo ok')));
    expect(pool.connectionsOf(target).every((c) => c.channels <= 10)).toBe(true);
    // The fixture's sshd does refuse the 11th session on a connection.
    expect(pool.refusedChannels).toBeGreaterThan(0);
    const results = opened.map(({ channel }) => collect(channel));
    for (const { channel } of opened) channel.end('\n');
    expect((await Promise.all(results)).every((r) => r.out === 'ok\n')).toBe(true);
  });

  it('reuses one connection for channels one after another', async () => {
    await using pool = new SshConnectionPool();
    const target = sshTarget();
    const ids = new Set<number>();
    for (let i = 0; i < 5; i++) {
      const { channel, connection } = await pool.exec(target, 'echo hi');
      ids.add(connection.id);
      expect((await collect(channel)).out).toBe('hi\n');
    }
    expect(ids.size).toBe(1);
  });

  it('notices a connection whose sshd process was killed, fails its channels clearly, and reconnects on the next call', async () => {
    await using pool = new SshConnectionPool();
    const target = sshTarget();
    const { channel, connection } = await pool.exec(target, 'echo "$PPID $$"; exec sleep 1000');
    const [sshdPid, shellPid] = (await firstLine(channel)).split(' ').map(Number) as [number, number];
    leftovers.push(shellPid);
    const closed = new Promise((resolve) => channel.once('close', resolve));
    process.kill(sshdPid, 'SIGKILL');
    await closed;
    expect(connection.lost).toBeInstanceOf(ConnectionLostError);
    expect(connection.lost?.message).toContain(`${target.host}:${target.port}`);
    await expect(connection.exec('true')).rejects.toBeInstanceOf(ConnectionLostError);
    expect(pool.connectionsOf(target)).toEqual([]);
    const next = await pool.exec(target, 'echo back');
    expect(next.connection.id).not.toBe(connection.id);
    expect((await collect(next.channel)).out).toBe('back\n');
  });

  it("a root helper whose channel ends without an exit status fails, saying why; never a result with no exit code", async () => {
    const target = sshTarget();
    // The connection lost under it: its sshd killed while the helper runs.
    {
      await using pool = new SshConnectionPool();
      const run = remoteRunner(pool, target);
      const marker = `berth-helper-cut-${process.pid}-a`;
      const pending = run('echo "$PPID $$" > "/tmp/$1"; exec sleep 1000', [marker]).then((r) => r, (e: unknown) => e);
      const file = join('/tmp', marker);
      expect(await waitFor(() => existsSync(file) && readFileSync(file, 'utf8').includes(' '), 20_000, 20)).toBe(true);
      const [sshdPid, helperPid] = readFileSync(file, 'utf8').trim().split(' ').map(Number) as [number, number];
      rmSync(file, { force: true });
      leftovers.push(helperPid);
      process.kill(sshdPid, 'SIGKILL');
      const cut = await pending;
      expect(cut).toBeInstanceOf(ConnectionLostError);
      expect((cut as Error).message).toContain(`${target.host}:${target.port}`);
    }
    // The connection closed by berth (its pool closed) while the helper runs.
    {
      const pool = new SshConnectionPool();
      const run = remoteRunner(pool, target);
      const marker = `berth-helper-cut-${process.pid}-b`;
      const pending = run('echo "$$" > "/tmp/$1"; exec sleep 1000', [marker]).then((r) => r, (e: unknown) => e);
      const file = join('/tmp', marker);
      expect(await waitFor(() => existsSync(file) && readFileSync(file, 'utf8').trim() !== '', 20_000, 20)).toBe(true);
      const helperPid = Number(readFileSync(file, 'utf8').trim());
      rmSync(file, { force: true });
      leftovers.push(helperPid);
      await pool.close();
      const cut = await pending;
      expect(cut).toBeInstanceOf(BackendUnavailableError);
      expect((cut as Error).message).toMatch(/berth closed it while a helper still ran on it/);
    }
  });

  it('counts a connection whose peer stopped answering keepalives as lost', async () => {
    await using pool = new SshConnectionPool({ keepaliveIntervalMs: 200, keepaliveCountMax: 2 });
    const target = sshTarget();
    const { channel, connection } = await pool.exec(target, 'echo "$PPID $$"; exec sleep 1000');
    const [sshdPid, shellPid] = (await firstLine(channel)).split(' ').map(Number) as [number, number];
    leftovers.push(sshdPid, shellPid);
    process.kill(sshdPid, 'SIGSTOP');
    expect(await waitFor(() => connection.lost !== undefined, 20_000, 50)).toBe(true);
    expect(connection.lost?.message).toContain('keepalive');
    const next = await pool.exec(target, 'echo fresh');
    expect((await collect(next.channel)).out).toBe('fresh\n');
  });

  it('fails closed with host, port and cause when nothing listens, and tries again on the next call', async () => {
    await using pool = new SshConnectionPool({ connectTimeoutMs: 5_000 });
    const target = sshTarget({ port: 1 });
    for (let i = 0; i < 2; i++) {
      const err = await pool.exec(target, 'true').catch((e: unknown) => e);
      expect(err).toBeInstanceOf(BackendUnavailableError);
      expect((err as Error).message).toContain(`${target.host}:1`);
      expect((err as Error).message).toContain('connection refused');
      expect(pool.connectionsOf(target)).toEqual([]);
    }
  });

  it('names the user when the key is not accepted', async () => {
    const dir = tempDir('berth-ssh-key-');
    const key = join(dir, 'stranger');
    execFileSync('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-f', key]);
    await using pool = new SshConnectionPool();
    const err = await pool.exec(sshTarget({ identityFile: key }), 'true').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(BackendUnavailableError);
    expect((err as Error).message).toContain('authentication as "root" failed');
  });

  it('closes a connection that went idle, and refuses channels once the pool is closed', async () => {
    const pool = new SshConnectionPool({ idleCloseMs: 100 });
    const target = sshTarget();
    const { channel } = await pool.exec(target, 'true');
    await collect(channel);
    expect(await waitFor(() => pool.connectionsOf(target).length === 0, 10_000, 20)).toBe(true);
    await pool.close();
    const err = await pool.exec(target, 'true').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(BerthError);
    expect((err as BerthError).code).toBe('shutting_down');
  });
});

describeSsh('ssh authentication through an agent (real sshd, real ssh-agent)', () => {
  it('authenticates with a key held by ssh-agent, and the remote session gets no agent socket', async () => {
    const dir = tempDir('berth-ssh-agent-');
    const sock = join(dir, 'agent.sock');
    const agent = spawn('ssh-agent', ['-D', '-a', sock], { stdio: 'ignore' });
    try {
      expect(await waitFor(() => existsSync(sock), 10_000, 50)).toBe(true);
      execFileSync('ssh-add', [sshTarget().identityFile as string], { env: { ...process.env, SSH_AUTH_SOCK: sock }, stdio: 'ignore' });
      await using pool = new SshConnectionPool();
      const target = sshTarget({ identityFile: undefined, agentSocket: sock });
      const { channel } = await pool.exec(target, 'echo "agent=${SSH_AUTH_SOCK:-none}"');
      expect((await collect(channel)).out).toBe('agent=none\n');
    } finally {
      agent.kill('SIGTERM');
    }
  });
});
