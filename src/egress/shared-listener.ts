import { createServer, type Server, type Socket } from 'node:net';
import { BerthError } from '../errors.js';
import type { Logger } from '../logging/logger.js';
import { parseProxyAuthorization, tokenMatches, type ProxyCredential } from './proxy-credential.js';
import type { EgressProxy, ProxyGate, GateAnswer } from './proxy.js';
import type { EgressSandbox } from './types.js';

/*
 * One listener for every sandbox whose network namespace berth cannot enter (pods on a cluster):
 * on an address the sandboxes reach (their NetworkPolicy lets them reach nothing else), and the
 * sandbox a connection belongs to is the one whose proxy credential its first request carries
 * (proxy-credential.ts), never the address it comes from. A missing or wrong credential is
 * answered 407 and reported (to the sandbox it names, when it names one). Each sandbox holds at most
 * `maxConnectionsPerSandbox` client connections here, as on a listener of its own: one more is
 * closed as its credential is read, unanswered, like a connection its own listener would not accept.
 */

interface Registered {
  ref: string;
  token: string;
  sandbox: EgressSandbox;
}

export interface SharedListenerOptions {
  host: string;
  port: number;
  /** What one sandbox's own listener would admit (`egressProxy.maxConnectionsPerSandbox`): this one admits that per sandbox it serves, plus one share for connections not yet named. */
  maxConnectionsPerSandbox: number;
  log: Logger;
}

export class SharedEgressListener implements ProxyGate {
  private readonly byUser = new Map<string, Registered>();
  private readonly userOf = new Map<string, string>();
  /** The client connections each sandbox (by ref) holds here, until they close. */
  private readonly open = new Map<string, Set<Socket>>();
  /** Connections not yet named by a credential, by source address: each address holds at most one share. */
  private readonly unnamed = new Map<string, number>();
  private readonly unnamedFrom = new WeakMap<Socket, string>();
  /** When each source address last had a refusal logged (one line a minute each: a client cannot flood the log). */
  private readonly lastWarned = new Map<string, number>();

  private constructor(private readonly server: Server, private readonly log: Logger, private readonly perSandbox: number) {
    this.bound();
  }

  /**
   * Listens on `host:port` and hands each connection to `proxy`, gated by this listener.
   *
   * @throws BerthError `listen_failed` naming the address and the fix.
   */
  static async start(proxy: EgressProxy, o: SharedListenerOptions): Promise<SharedEgressListener> {
    const server = createServer();
    const listener = new SharedEgressListener(server, o.log, o.maxConnectionsPerSandbox);
    server.on('connection', (socket: Socket) => {
      if (listener.admit(socket)) proxy.handleGated(socket, listener);
      else socket.destroy();
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', (e: NodeJS.ErrnoException) => reject(new BerthError('listen_failed',
        `berth's egress proxy cannot listen on ${o.host}:${o.port} (egressProxy.listen): ${e.code ?? e.message}; ` +
        'give an address of this host that is free, or stop what listens there', { cause: e })));
      server.listen({ host: o.host, port: o.port, exclusive: true }, () => resolve());
    });
    server.on('error', (e) => o.log.debug(`shared egress listener: ${e.message}`));
    return listener;
  }

  /** The port it listens on (the configured one, or the one the system chose for port 0). */
  get port(): number {
    return (this.server.address() as { port: number }).port;
  }

  /** Serves sandbox `ref` under `credential` from now on (again: its context is replaced). */
  register(ref: string, credential: ProxyCredential, sandbox: EgressSandbox): void {
    const before = this.userOf.get(ref);
    if (before !== undefined && before !== credential.user) this.byUser.delete(before);
    this.byUser.set(credential.user, { ref, token: credential.token, sandbox });
    this.userOf.set(ref, credential.user);
    this.bound();
  }

  /** Connections past this are refused by the server before berth reads a byte. */
  private bound(): void {
    this.server.maxConnections = (this.byUser.size + 1) * this.perSandbox;
  }

  /** Stops serving sandbox `ref`; its context, for the caller to release its connections. */
  unregister(ref: string): EgressSandbox | undefined {
    const user = this.userOf.get(ref);
    if (user === undefined) return undefined;
    this.userOf.delete(ref);
    const r = this.byUser.get(user);
    if (r?.ref !== ref) return undefined;
    this.byUser.delete(user);
    this.open.delete(ref);
    this.bound();
    return r.sandbox;
  }

  get size(): number {
    return this.byUser.size;
  }

  authenticate(header: string | undefined, socket?: Socket): GateAnswer {
    const given = parseProxyAuthorization(header);
    if (given === undefined) return { refused: header === undefined ? 'no proxy credential (Proxy-Authorization)' : 'a proxy credential that is not Basic user:password' };
    const r = this.byUser.get(given.user);
    if (r === undefined) return { refused: 'a proxy credential of no sandbox berth serves' };
    if (!tokenMatches(given.password, r.token)) return { refused: 'a wrong proxy token for this sandbox', claimed: r.sandbox };
    if (socket !== undefined && !this.hold(r.ref, socket)) return { full: r.sandbox };
    return { sandbox: r.sandbox };
  }

  /**
   * A new connection, before any byte is read: refused when its source address already holds
   * `maxConnectionsPerSandbox` connections no credential has named yet, so one pod that opens
   * connections and sends nothing cannot take the listener's whole bound from the others. (Where
   * the cluster SNATs pods to their node's address, the pods of one node share that one share
   * while they connect; once named, a connection counts against its sandbox instead.)
   */
  admit(socket: Socket): boolean {
    const from = socket.remoteAddress ?? '';
    const n = this.unnamed.get(from) ?? 0;
    if (n >= this.perSandbox) {
      this.warnOnce(`unnamed:${from}`, `egress: refused a connection from ${from || 'an unknown address'}: it holds ${n} not yet named by a proxy credential, the most egressProxy.maxConnectionsPerSandbox allows (further refusals from it are not logged for a minute)`);
      return false;
    }
    this.unnamed.set(from, n + 1);
    this.unnamedFrom.set(socket, from);
    socket.once('close', () => this.named(socket));
    return true;
  }

  /** `socket` no longer counts as unnamed (its credential named it, or it closed). */
  private named(socket: Socket): void {
    const from = this.unnamedFrom.get(socket);
    if (from === undefined) return;
    this.unnamedFrom.delete(socket);
    const n = (this.unnamed.get(from) ?? 1) - 1;
    if (n <= 0) this.unnamed.delete(from);
    else this.unnamed.set(from, n);
  }

  /** Counts `socket` against sandbox `ref` until it closes; false when the sandbox already holds its bound (or the socket is gone). */
  private hold(ref: string, socket: Socket): boolean {
    if (socket.destroyed) return false;
    let set = this.open.get(ref);
    if (set === undefined) this.open.set(ref, set = new Set());
    if (set.size >= this.perSandbox) {
      this.warnOnce(`full:${ref}`, `egress: refused a connection of sandbox ${ref}: ${set.size} are open, the most egressProxy.maxConnectionsPerSandbox allows (further refusals for it are not logged for a minute)`);
      return false;
    }
    set.add(socket);
    this.named(socket);
    socket.once('close', () => {
      set.delete(socket);
      if (set.size === 0 && this.open.get(ref) === set) this.open.delete(ref);
    });
    return true;
  }

  /** Logs a refusal that names no sandbox (nobody else hears of it). */
  unclaimed(what: string, from: string | undefined): void {
    const source = from ?? 'an unknown address';
    this.warnOnce(source, `egress: refused a connection from ${source} with ${what} (further refusals from it are not logged for a minute)`);
  }

  /** Logs `line` unless a line under `key` was logged in the last minute. */
  private warnOnce(key: string, line: string): void {
    const now = Date.now();
    if (now - (this.lastWarned.get(key) ?? 0) < 60_000) return;
    if (this.lastWarned.size > 10_000) this.lastWarned.clear();
    this.lastWarned.set(key, now);
    this.log.warn(line);
  }

  async close(): Promise<void> {
    this.byUser.clear();
    this.userOf.clear();
    this.open.clear();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}
