import { spawn } from 'node:child_process';
import { closeSync, fstatSync, openSync } from 'node:fs';
import { Server, type Socket } from 'node:net';
import { BerthError } from '../errors.js';

/*
 * A TCP listener inside another network namespace (a container's, a bwrap sandbox's), owned by
 * berth's own process: every connection a sandbox makes to it arrives in berth, which knows the
 * sandbox from the listener alone. A process can listen only in its own namespace, so a short-lived
 * child enters the sandbox's (`nsenter --net`), listens, and hands the listening socket back over
 * IPC; then it exits. The child enters the network namespace only: it sees berth's files, never the
 * sandbox's, and runs nothing the sandbox provides.
 */

/** The proxy's port inside every sandbox: each network namespace has its own port space. */
export const EGRESS_PROXY_PORT = 3128;

export interface NetnsListenOptions {
  /** Address inside the namespace (default 127.0.0.1: the sandbox's own loopback). */
  host?: string;
  /** Default EGRESS_PROXY_PORT. */
  port?: number;
  /** Connections open at once; more are closed as they arrive (default: no bound). */
  maxConnections?: number;
  /**
   * The namespace expected at `netnsPath`, as `net:[inode]` (read when the sandbox started): a
   * path under /proc/<pid> names another namespace once that pid is reused.
   */
  expectNs?: string;
  /** The nsenter binary (default: `nsenter` on PATH). */
  nsenterPath?: string;
  timeoutMs?: number;
}

const DEFAULT_TIMEOUT_MS = 10_000;
/** The child's fd that holds the namespace (stdin, stdout, stderr, the IPC channel, then this). */
const NS_FD = 4;

/*
 * The child. It listens with pauseOnConnect and relays any connection it accepts before its own
 * copy of the listening socket is closed, so a client that connects in that moment still reaches
 * berth, unread. Messages arrive in order: the server first, then relayed sockets.
 */
const CHILD = `
const net = require('node:net');
const ns = require('node:fs').readlinkSync('/proc/self/ns/net');
const [host, port] = [process.argv[1], Number(process.argv[2])];
let pending = 1;
const done = () => { if (--pending === 0) process.disconnect(); };
const s = net.createServer({ pauseOnConnect: true });
s.on('error', (e) => process.send({ error: e.code || e.message, ns }, () => process.disconnect()));
s.on('connection', (c) => { pending++; process.send({ relay: true }, c, done); });
s.listen({ host, port, exclusive: true }, () => process.send({ ns }, s, () => s.close(done)));
`;

/**
 * Listens on `host:port` inside the network namespace at `netnsPath` (`/proc/<pid>/ns/net` of a
 * process in it). Resolves with the listening server, in this process: attach its 'connection'
 * listener right away. Needs root (entering another namespace takes CAP_SYS_ADMIN) and nsenter.
 *
 * @example
 * const server = await listenInNetns(`/proc/${pid}/ns/net`, { maxConnections: 256 });
 * server.on('connection', (socket) => proxy.handle(socket, sandbox));
 * // ... when the sandbox goes:
 * server.close();
 * @throws BerthError `listen_failed` naming the namespace and the cause: gone, not the expected
 *   one, the port taken inside it, nsenter missing or refused.
 */
export async function listenInNetns(netnsPath: string, options: NetnsListenOptions = {}): Promise<Server> {
  const host = options.host ?? '127.0.0.1';
  const port = options.port ?? EGRESS_PROXY_PORT;
  const where = `${host}:${port} in network namespace ${netnsPath}`;
  const nsFd = openNamespace(netnsPath, options.expectNs);
  let child;
  try {
    child = spawn(options.nsenterPath ?? 'nsenter', [`--net=/proc/self/fd/${NS_FD}`, '--', process.execPath, '-e', CHILD, host, String(port)], {
      // No environment of berth's beyond PATH: NODE_OPTIONS and the like stay out of the child.
      env: { PATH: process.env['PATH'] ?? '/usr/sbin:/usr/bin:/sbin:/bin' },
      stdio: ['ignore', 'ignore', 'pipe', 'ipc', nsFd],
    });
  } finally {
    closeSync(nsFd);
  }
  let stderr = '';
  child.stderr?.setEncoding('utf8').on('data', (d: string) => (stderr = (stderr + d).slice(-2048)));
  const timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  return new Promise<Server>((resolve, reject) => {
    let server: Server | undefined;
    const fail = (message: string, cause?: unknown): void => {
      clearTimeout(timer);
      child.kill('SIGKILL');
      server?.close();
      reject(new BerthError('listen_failed', message, cause === undefined ? undefined : { cause }));
    };
    const timer = setTimeout(() => fail(`cannot listen on ${where}: no answer within ${timeoutMs} ms`), timeoutMs);
    child.once('error', (err: NodeJS.ErrnoException) => {
      if (err.code === 'ENOENT') fail(`cannot listen on ${where}: nsenter not found (${options.nsenterPath ?? 'nsenter on PATH'}); install util-linux, which berth uses to enter a sandbox's network namespace`, err);
      else fail(`cannot listen on ${where}: starting nsenter failed: ${err.message}`, err);
    });
    child.on('message', (m: { error?: string; ns?: string; relay?: boolean }, handle: unknown) => {
      if (m.relay === true && server !== undefined) {
        server.emit('connection', handle as Socket);
        return;
      }
      if (m.error !== undefined) {
        fail(listenError(m.error, host, port, netnsPath, m.ns));
        return;
      }
      server = handle as Server;
      if (options.maxConnections !== undefined) server.maxConnections = options.maxConnections;
      clearTimeout(timer);
      // The child exits once its copy is closed; one that lingers past the deadline is ended.
      setTimeout(() => child.kill('SIGKILL'), timeoutMs).unref();
      resolve(server);
    });
    // 'close', not 'exit': it comes after the IPC channel has delivered every message.
    child.once('close', (code, signal) => {
      if (server !== undefined) return;
      const said = stderr.trim().split('\n').pop() ?? '';
      fail(`cannot listen on ${where}: ${said || `the helper exited (${signal ?? `code ${code}`})`}` +
        (/Operation not permitted/.test(said) ? '; entering a sandbox\'s network namespace needs root' : ''));
    });
  });
}

/*
 * A listening socket one berth process passes to another it starts (a CLI call ending, to the
 * keeper it starts, `berth __keep`): the socket itself, so the port never closes between the
 * two. Passed as an inherited descriptor at the child's start, never over a channel afterwards, so
 * nothing can arrive after the child stopped expecting it.
 */

/**
 * The descriptor of a listening `server` in this process (to pass to a child it starts), or
 * undefined where Node does not give one. Read from the server's handle (`_handle.fd`, which Node
 * has on Linux for TCP handles, undocumented): the only way to pass an open listening socket to
 * a process at its start.
 */
export function listeningFd(server: Server): number | undefined {
  const fd = (server as unknown as { _handle?: { fd?: unknown } | null })._handle?.fd;
  return typeof fd === 'number' && fd >= 0 ? fd : undefined;
}

/**
 * Serves the listening socket this process inherited as descriptor `fd` (see listeningFd):
 * connections that reached it while no process accepted wait in its backlog and are accepted
 * now. Attach the 'connection' listener right away, as for listenInNetns.
 *
 * @throws BerthError `listen_failed` when `fd` is not a socket listening on `host:port` (a socket
 *   is closed then; anything else is left alone).
 */
export async function serveInheritedListener(fd: number, options: { host: string; port: number; maxConnections?: number }): Promise<Server> {
  const where = `the listening socket passed as descriptor ${fd}`;
  let isSocket = false;
  try {
    isSocket = fstatSync(fd).isSocket();
  } catch (err) {
    throw new BerthError('listen_failed', `cannot serve ${where}: ${(err as Error).message}`, { cause: err });
  }
  // Not a socket: not what was passed, and not this code's to close.
  if (!isSocket) throw new BerthError('listen_failed', `cannot serve ${where}: it is not a socket`);
  const server = new Server();
  // A failed listen closes the handle it opened on the descriptor (and with it the descriptor).
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen({ fd }, () => {
      server.off('error', reject);
      resolve();
    });
  }).catch((err: unknown) => {
    throw new BerthError('listen_failed', `cannot serve ${where}: ${(err as Error).message}`, { cause: err });
  });
  const at = server.address();
  if (typeof at !== 'object' || at === null || at.address !== options.host || at.port !== options.port) {
    server.close();
    throw new BerthError('listen_failed', `cannot serve ${where}: it listens on ${typeof at === 'object' && at !== null ? `${at.address}:${at.port}` : String(at)}, not ${options.host}:${options.port}`);
  }
  if (options.maxConnections !== undefined) server.maxConnections = options.maxConnections;
  return server;
}

/** Opens the namespace file (holding it fixes which namespace the child enters) and checks it. */
function openNamespace(netnsPath: string, expectNs: string | undefined): number {
  let fd: number;
  try {
    fd = openSync(netnsPath, 'r');
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    const why = code === 'ENOENT' || code === 'ESRCH' ? 'it is gone (the sandbox ended)' : (err as Error).message;
    throw new BerthError('listen_failed', `cannot listen in network namespace ${netnsPath}: ${why}`, { cause: err });
  }
  const found = `net:[${fstatSync(fd).ino}]`;
  if (expectNs !== undefined && found !== expectNs) {
    closeSync(fd);
    throw new BerthError('listen_failed',
      `cannot listen in network namespace ${netnsPath}: it is ${found}, not the sandbox's ${expectNs} (the sandbox ended and its pid was reused)`);
  }
  return fd;
}

function listenError(code: string, host: string, port: number, netnsPath: string, ns: string | undefined): string {
  const space = `network namespace ${netnsPath}${ns === undefined ? '' : ` (${ns})`}`;
  if (code === 'EADDRINUSE') {
    return `port ${port} on ${host} is taken inside ${space}: a process there listens on it already (in a sandbox, the sandbox's own); ` +
      'berth\'s egress listener needs it: end that process, or remove the sandbox so berth creates it again';
  }
  if (code === 'EADDRNOTAVAIL') return `cannot listen on ${host}:${port} inside ${space}: no interface there has address ${host}`;
  return `cannot listen on ${host}:${port} inside ${space}: ${code}`;
}
