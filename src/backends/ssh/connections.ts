import type { ClientChannel } from 'ssh2';
import { BerthError } from '../../errors.js';
import { Logger } from '../../logging/logger.js';
import { endpointOf } from './errors.js';
import { SshConnection } from './connection.js';
import { DEFAULT_POOL_SETTINGS, targetKey, type PoolSettings, type SshTarget } from './target.js';

/** One exec channel and the connection that carries it. */
export interface PooledChannel {
  channel: ClientChannel;
  connection: SshConnection;
}

/** A connection of the pool, counted from the moment it is asked for (before it is up). */
interface Entry {
  ready: Promise<SshConnection>;
  conn: SshConnection | undefined;
  /** Channels open or being opened on it. */
  inUse: number;
  /** The server declined a channel below our count: none is asked of it until one of its channels closes. */
  saturated: boolean;
  dead: boolean;
  idleTimer: NodeJS.Timeout | undefined;
}

/** Attempts at opening one channel when servers decline (each on a connection that had room). */
const MAX_OPEN_ATTEMPTS = 3;

/**
 * SSH connections shared by many channels: per (host, port, user, credentials, known_hosts),
 * as many connections as needed so that none carries more than `maxSessions` channels (a new
 * one is opened before the server's MaxSessions would refuse one; a server that refuses anyway
 * is taken at its word and the channel goes elsewhere). A lost connection leaves the pool at
 * once, so the next channel reconnects; an unreachable host fails closed with a `BerthError`
 * naming host, port and cause, and nothing is retried elsewhere. Idle connections close.
 *
 * @example
 * await using pool = new SshConnectionPool({ keepaliveIntervalMs: 15_000 });
 * const { channel } = await pool.exec(target, 'exec /bin/true');
 */
export class SshConnectionPool implements AsyncDisposable {
  private readonly settings: PoolSettings;
  private readonly entries = new Map<string, Entry[]>();
  private nextId = 1;
  private closed = false;
  private refused = 0;

  constructor(settings: Partial<PoolSettings> = {}, private readonly log: Logger = Logger.silent()) {
    this.settings = { ...DEFAULT_POOL_SETTINGS, ...settings };
    if (!(Number.isInteger(this.settings.maxSessions) && this.settings.maxSessions >= 1)) {
      throw new BerthError('config_invalid', `ssh maxSessions must be a whole number >= 1, got ${this.settings.maxSessions}`);
    }
  }

  /**
   * Opens an exec channel running `command` on `target`, on a connection with room for it.
   * The channel's slot is given back when the channel closes.
   */
  async exec(target: SshTarget, command: string): Promise<PooledChannel> {
    let lastRefusal: unknown;
    for (let attempt = 0; attempt < MAX_OPEN_ATTEMPTS; attempt++) {
      const entry = this.reserve(target);
      let conn: SshConnection;
      try {
        conn = await entry.ready;
      } catch (err) {
        this.release(target, entry);
        throw err;
      }
      try {
        const channel = await conn.exec(command);
        channel.once('close', () => this.release(target, entry));
        return { channel, connection: conn };
      } catch (err) {
        this.release(target, entry);
        if ((err as { refused?: unknown }).refused !== true) throw err;
        entry.saturated = true;
        this.refused += 1;
        lastRefusal = err;
      }
    }
    throw new BerthError(
      'backend_unavailable',
      `SSH host ${endpointOf(target.host, target.port)} refused a new channel ${MAX_OPEN_ATTEMPTS} times, on fresh connections too: ` +
        `${(lastRefusal as Error).message}. Check the host's sshd MaxSessions and MaxStartups, and set the ssh maxSessions setting to at most its MaxSessions`,
      { cause: lastRefusal },
    );
  }

  /** Connections to `target` and the channels each carries (tests, diagnostics). */
  connectionsOf(target: SshTarget): { id: number; channels: number; up: boolean }[] {
    return (this.entries.get(targetKey(target)) ?? []).map((e) => ({
      id: e.conn?.id ?? 0,
      channels: e.inUse,
      up: e.conn?.usable === true,
    }));
  }

  /** Channels the servers declined so far (each was then opened elsewhere or failed): 0 when maxSessions matches the servers. */
  get refusedChannels(): number {
    return this.refused;
  }

  /** Closes every connection (their channels end). Idempotent, bounded, never throws. */
  async close(): Promise<void> {
    this.closed = true;
    const all = [...this.entries.values()].flat();
    this.entries.clear();
    await Promise.all(all.map(async (e) => {
      clearTimeout(e.idleTimer);
      e.dead = true;
      const conn = await e.ready.catch(() => undefined);
      await conn?.close();
    }));
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  /** Picks a connection with room (synchronously, so concurrent callers count each other), or starts one. */
  private reserve(target: SshTarget): Entry {
    if (this.closed) throw new BerthError('shutting_down', 'the SSH connection pool was closed; create a new backend');
    const key = targetKey(target);
    const list = this.entries.get(key) ?? [];
    this.entries.set(key, list);
    let entry = list.find((e) => !e.dead && !e.saturated && e.inUse < this.settings.maxSessions && e.conn?.lost === undefined);
    if (entry === undefined) {
      entry = this.connect(target, list);
      list.push(entry);
    }
    entry.inUse += 1;
    clearTimeout(entry.idleTimer);
    entry.idleTimer = undefined;
    return entry;
  }

  private connect(target: SshTarget, list: Entry[]): Entry {
    const entry: Entry = { ready: undefined as never, conn: undefined, inUse: 0, saturated: false, dead: false, idleTimer: undefined };
    const drop = (): void => {
      entry.dead = true;
      clearTimeout(entry.idleTimer);
      const at = list.indexOf(entry);
      if (at >= 0) list.splice(at, 1);
    };
    entry.ready = SshConnection.open(this.nextId++, target, this.settings, this.log).then(
      (conn) => {
        entry.conn = conn;
        conn.onLost(drop);
        // Closed while connecting: this connection is nobody's.
        if (this.closed) void conn.close();
        return conn;
      },
      (err: unknown) => {
        // Fail closed, and remember nothing: the next call tries the host again.
        drop();
        throw err;
      },
    );
    entry.ready.catch(() => undefined);
    return entry;
  }

  private release(target: SshTarget, entry: Entry): void {
    entry.inUse = Math.max(0, entry.inUse - 1);
    entry.saturated = false;
    if (entry.inUse > 0 || entry.dead || this.closed) return;
    clearTimeout(entry.idleTimer);
    entry.idleTimer = setTimeout(() => {
      if (entry.inUse > 0 || entry.dead) return;
      const list = this.entries.get(targetKey(target));
      const at = list?.indexOf(entry) ?? -1;
      if (at >= 0) list?.splice(at, 1);
      entry.dead = true;
      void entry.conn?.close();
    }, this.settings.idleCloseMs);
    entry.idleTimer.unref();
  }
}
