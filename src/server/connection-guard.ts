import { STATUS_CODES, type IncomingMessage, type Server, type ServerOptions, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { ServerSettings } from '../config/types.js';
import { clientKey } from './client-address.js';
import { errorBody, HttpError } from './http-error.js';

/*
 * The bounds on `berth serve`'s connections, which no token is needed to open: how many at once
 * (in all, and from one client address), how long a request head may take, how long a connection
 * may idle between requests, how long a request body may go without a byte. A call that runs (an
 * exec may run for a day with nothing on the wire) and a stream that is open are never cut: only
 * a client's silence where berth waits for it counts.
 */

/** Why the server closed a connection it had accepted. */
export type ClosedReason = 'header_timeout' | 'keep_alive' | 'body_stall';
/** The bound a connection was refused by as it arrived. */
export type RefusedLimit = 'total' | 'per_address';

/** The `server:` keys the bounds come from. */
export type ConnectionSettings = Pick<ServerSettings,
  'maxConnections' | 'maxConnectionsPerAddress' | 'headerTimeoutSeconds' | 'keepAliveSeconds' | 'bodyStallSeconds'>;

/** Told of each connection closed or refused for a bound (the server's metrics count them). */
export interface ConnectionEvents {
  closed(reason: ClosedReason): void;
  refused(limit: RefusedLimit): void;
}

/**
 * node:http's own timers for `settings`: its head timeout (which also covers a connection that
 * sends nothing), its keep-alive timeout, and no bound on a whole request (an upload that keeps
 * sending takes as long as it takes; `ConnectionGuard` bounds a stalled body instead). Node looks
 * for heads past their time every `connectionsCheckingInterval`: a quarter of the bound, at most a
 * second, so a head is cut at most that late.
 */
export function httpServerOptions(settings: ConnectionSettings): ServerOptions {
  const headersTimeout = settings.headerTimeoutSeconds * 1000;
  return {
    requestTimeout: 0,
    headersTimeout,
    keepAliveTimeout: settings.keepAliveSeconds * 1000,
    connectionsCheckingInterval: Math.min(1000, headersTimeout / 4),
  };
}

/** What the guard knows of one accepted connection: its client, and its latest request. */
interface Connection {
  key: string;
  req: IncomingMessage | undefined;
  res: ServerResponse | undefined;
  /** Its body was held back by berth (unread) when its timer last fired. */
  heldBack: boolean;
}

/**
 * Guards one server's connections (create the server with `httpServerOptions`, then `attach`):
 * refuses a connection past `maxConnections` or `maxConnectionsPerAddress` by closing it at once,
 * answers a head that did not arrive in time with 408, and closes a connection idle between
 * requests or whose request body stalled. Each closing and refusal is told to `events`, and
 * logged the first time of its kind only (a flood of them is one line, the metrics count the rest).
 *
 * @example
 * const guard = new ConnectionGuard(config.server, { closed: (r) => ..., refused: (l) => ... }, log);
 * const server = createServer(httpServerOptions(config.server), (req, res) => { guard.request(req, res); ... });
 * guard.attach(server);
 */
export class ConnectionGuard {
  private readonly connections = new WeakMap<Socket, Connection>();
  private readonly perAddress = new Map<string, number>();
  private readonly logged = new Set<ClosedReason | RefusedLimit>();
  private readonly bodyStallMs: number;
  private count = 0;

  constructor(private readonly settings: ConnectionSettings, private readonly events: ConnectionEvents, private readonly log: (message: string) => void) {
    this.bodyStallMs = settings.bodyStallSeconds * 1000;
  }

  /** Connections accepted and open now. */
  get open(): number {
    return this.count;
  }

  /** Takes charge of `server`'s connections; call once, before it listens. */
  attach(server: Server): void {
    server.maxConnections = this.settings.maxConnections;
    server.on('drop', () => this.refused('total', `refused a connection: ${this.settings.maxConnections} are open, the most server.maxConnections allows`));
    server.on('connection', (socket: Socket) => this.connected(socket));
    // With a listener here node no longer destroys a socket whose timer fired: `timedOut` decides.
    server.on('timeout', (socket: Socket) => this.timedOut(socket));
    server.on('clientError', (err: NodeJS.ErrnoException, socket: Socket) => this.clientError(err, socket));
  }

  /**
   * A request arrived on one of the connections. When its body is still on its way once node has
   * parsed what it read with the head (looked at on the next turn of the loop: a `nextTick` comes
   * before that parse), a timer watches for the body to stall; `timedOut` lets it be once the body
   * is in. Most bodies come with their head, and are spared the timer: one on every exec cost
   * ~20-30 µs of a ~500-600 µs round trip here (old and new server interleaved, load ~12); the
   * look costs well under a microsecond.
   */
  request(req: IncomingMessage, res: ServerResponse): void {
    const c = this.connections.get(req.socket);
    if (c === undefined) return;
    c.req = req;
    c.res = res;
    c.heldBack = false;
    const length = req.headers['content-length'];
    if ((length !== undefined && length !== '0') || req.headers['transfer-encoding'] !== undefined) setImmediate(watchBody, req, this.bodyStallMs);
  }

  private connected(socket: Socket): void {
    const key = clientKey(socket.remoteAddress);
    const held = this.perAddress.get(key) ?? 0;
    if (held >= this.settings.maxConnectionsPerAddress) {
      socket.destroy();
      this.refused('per_address', `refused a connection from ${key}: ${held} are open from there, the most server.maxConnectionsPerAddress allows`);
      return;
    }
    this.perAddress.set(key, held + 1);
    this.count++;
    this.connections.set(socket, { key, req: undefined, res: undefined, heldBack: false });
    socket.once('close', () => {
      this.count--;
      const left = (this.perAddress.get(key) ?? 1) - 1;
      if (left > 0) this.perAddress.set(key, left);
      else this.perAddress.delete(key);
    });
  }

  /**
   * A connection's timer fired: node's keep-alive timer after an answer, or the body timer of
   * `request`. Idle after its answer went out: closed. A body that is in: the call is running, or
   * its answer is on its way to a client that reads it slowly, and either may take as long as it
   * does (the timer is dropped). A body berth has not read all of (its call waits for
   * the session, or the sandbox takes it slowly): berth's delay, not the client's (the timer starts
   * again), and once berth reads again the client gets a whole bound from then: a client held back
   * (TCP's window full) sends nothing while berth does not read, so the silence since the last look
   * is not all its own. Otherwise the client sent nothing for `bodyStallSeconds`: closed.
   */
  private timedOut(socket: Socket): void {
    const c = this.connections.get(socket);
    const req = c?.req;
    const res = c?.res;
    if (req === undefined || res === undefined || res.writableFinished) {
      socket.destroy();
      this.events.closed('keep_alive');
      return;
    }
    if (req.complete) {
      socket.setTimeout(0);
      return;
    }
    if (socket.isPaused() || req.readableLength > 0) {
      c!.heldBack = true;
      socket.setTimeout(this.bodyStallMs);
      return;
    }
    if (c!.heldBack) {
      c!.heldBack = false;
      socket.setTimeout(this.bodyStallMs);
      return;
    }
    socket.destroy();
    this.closed('body_stall', `closed a connection whose request body got no byte for ${this.settings.bodyStallSeconds} s (server.bodyStallSeconds)`);
  }

  /**
   * A connection node could not turn into a request: a head past its time (408), or one it could
   * not parse (400, 431 for headers too large). Answered on the socket, which is then closed
   * whether or not the client reads (it may never close its end). An answer already under way on
   * the connection is not interleaved with: the connection is just closed.
   */
  private clientError(err: NodeJS.ErrnoException, socket: Socket): void {
    const timedOut = err.code === 'ERR_HTTP_REQUEST_TIMEOUT';
    if (timedOut) {
      this.closed('header_timeout', `closed a connection that sent no complete request head within ${this.settings.headerTimeoutSeconds} s (server.headerTimeoutSeconds)`);
    }
    const res = this.connections.get(socket)?.res;
    if (!socket.writable || (res !== undefined && res.headersSent && !res.writableEnded)) {
      socket.destroy();
      return;
    }
    const [status, e] = timedOut
      ? [408, new HttpError('request_timeout', `the request head did not arrive within ${this.settings.headerTimeoutSeconds} s; send the request line and headers at once`)]
      : [err.code === 'HPE_HEADER_OVERFLOW' ? 431 : 400, new HttpError('bad_request', `malformed HTTP request (${err.code ?? 'parse error'})`)];
    const body = errorBody(e);
    socket.write(`HTTP/1.1 ${status} ${STATUS_CODES[status] ?? ''}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`);
    socket.destroySoon();
  }

  private closed(reason: ClosedReason, what: string): void {
    this.events.closed(reason);
    this.once(reason, `${what}; further ones are counted in /metrics (berth_server_connections_closed_total{reason="${reason}"}), not logged`);
  }

  private refused(limit: RefusedLimit, what: string): void {
    this.events.refused(limit);
    this.once(limit, `${what}; further refusals are counted in /metrics (berth_server_connections_refused_total{reason="${limit}"}), not logged`);
  }

  private once(kind: ClosedReason | RefusedLimit, message: string): void {
    if (this.logged.has(kind)) return;
    this.logged.add(kind);
    this.log(message);
  }
}

/** A body not all in yet (see `ConnectionGuard.request`): its connection's timer starts. */
function watchBody(req: IncomingMessage, bodyStallMs: number): void {
  if (!req.complete && !req.socket.destroyed) req.socket.setTimeout(bodyStallMs);
}
