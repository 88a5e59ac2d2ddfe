import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync, fstatSync, openSync } from 'node:fs';
import { connect, createServer, type Server } from 'node:net';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { listeningFd, serveInheritedListener } from '../../src/egress/netns-listener.js';
import { BerthError } from '../../src/errors.js';

/*
 * A listening socket passed from one berth process to the one it starts (a CLI call ending, to its
 * keeper) as an inherited descriptor: the port never closes between the two, and a connection
 * that arrives while neither accepts waits in the socket's backlog and is answered by the child.
 * Real processes and real sockets on loopback (no namespace needed: the socket is the point).
 */

const LISTENER = fileURLToPath(new URL('../../src/egress/netns-listener.ts', import.meta.url));

/** A child that, on a line on its stdin, serves its descriptor 3 as the listener on `port` and answers "child". */
function child(fd: number, port: number): { proc: ChildProcess; lines: string[]; next: () => Promise<string> } {
  const code = `
    import { serveInheritedListener } from ${JSON.stringify(LISTENER)};
    process.stdin.once('data', async () => {
      try {
        const s = await serveInheritedListener(3, { host: '127.0.0.1', port: ${port} });
        s.on('connection', (c) => c.end('child\\n'));
        process.stdout.write('serving\\n');
      } catch (e) {
        process.stdout.write('error ' + e.code + ' ' + e.message + '\\n');
      }
    });`;
  const proc = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', code], { stdio: ['pipe', 'pipe', 'inherit', fd] });
  const lines: string[] = [];
  const waiting: Array<(l: string) => void> = [];
  let buf = '';
  proc.stdout!.setEncoding('utf8').on('data', (d: string) => {
    buf += d;
    for (let i = buf.indexOf('\n'); i >= 0; i = buf.indexOf('\n')) {
      const line = buf.slice(0, i);
      buf = buf.slice(i + 1);
      const w = waiting.shift();
      if (w !== undefined) w(line);
      else lines.push(line);
    }
  });
  return { proc, lines, next: () => new Promise((resolve) => (lines.length > 0 ? resolve(lines.shift()!) : waiting.push(resolve))) };
}

/** What a connection to `port` reads until the other side ends it, or the error code it failed with. */
function ask(port: number, connected?: () => void): Promise<string> {
  return new Promise((resolve) => {
    let got = '';
    const c = connect({ host: '127.0.0.1', port }, connected);
    c.setEncoding('utf8').on('data', (d: string) => (got += d));
    c.on('end', () => resolve(got));
    c.on('error', (e: NodeJS.ErrnoException) => resolve(`error ${e.code ?? e.message}`));
  });
}

async function listening(): Promise<{ server: Server; port: number; fd: number }> {
  const server = createServer((c) => c.end('parent\n'));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const fd = listeningFd(server);
  if (fd === undefined) throw new Error('no descriptor for a listening TCP server');
  return { server, port: (server.address() as { port: number }).port, fd };
}

const children: ChildProcess[] = [];
afterEach(() => {
  for (const c of children.splice(0)) c.kill('SIGKILL');
});

describe('a listening socket passed to a child at its start', () => {
  it('keeps the port open after the passing process stops accepting; a connection made before the child serves it waits and is answered by the child', async () => {
    const { server, port, fd } = await listening();
    expect(await ask(port)).toBe('parent\n');
    const c = child(fd, port);
    children.push(c.proc);
    await new Promise<void>((resolve) => server.close(() => resolve()));
    // Neither process accepts now; the socket is still open in the child, so this connects and waits.
    let connected = false;
    const early = ask(port, () => (connected = true));
    await expect.poll(() => connected).toBe(true);
    c.proc.stdin!.write('go\n');
    expect(await c.next()).toBe('serving');
    expect(await early).toBe('child\n');
    expect(await ask(port)).toBe('child\n');
    // The child held the only copy: once it ends, the port is closed.
    c.proc.kill('SIGKILL');
    await new Promise((resolve) => c.proc.once('exit', resolve));
    expect(await ask(port)).toBe('error ECONNREFUSED');
  }, 30_000);

  it('a socket listening on another port than the one expected is refused by name and closed', async () => {
    const { server, port, fd } = await listening();
    const c = child(fd, port + 1);
    children.push(c.proc);
    await new Promise<void>((resolve) => server.close(() => resolve()));
    c.proc.stdin!.write('go\n');
    expect(await c.next()).toBe(`error listen_failed cannot serve the listening socket passed as descriptor 3: it listens on 127.0.0.1:${port}, not 127.0.0.1:${port + 1}`);
    // The child is alive and closed its copy: nothing holds the port any more.
    expect(c.proc.exitCode).toBeNull();
    expect(await ask(port)).toBe('error ECONNREFUSED');
  }, 30_000);

  it('a descriptor that is not a socket is refused and left open (it is not the passed one, so not this code\'s to close)', async () => {
    const fd = openSync(LISTENER, 'r');
    try {
      const err = await serveInheritedListener(fd, { host: '127.0.0.1', port: 3128 }).then(() => undefined, (e: unknown) => e);
      expect(err).toBeInstanceOf(BerthError);
      expect((err as BerthError).message).toBe(`cannot serve the listening socket passed as descriptor ${fd}: it is not a socket`);
      expect(fstatSync(fd).isFile()).toBe(true);
    } finally {
      closeSync(fd);
    }
  });
});
