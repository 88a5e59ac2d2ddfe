import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { getRequestListener, RequestError } from '@hono/node-server';
import type { Broker } from '../broker/broker.js';
import { createApp, routingPath } from './app.js';
import { DashboardFeed } from './dashboard-feed.js';
import { assertHostExposureAllowed, type Caller } from './caller.js';
import { ConnectionGuard, httpServerOptions } from './connection-guard.js';
import { errorBody, HttpError } from './http-error.js';
import { createMcpHttpHandler, type McpHttpHandler } from './mcp/http.js';
import { ServerMetrics } from './metrics.js';
import type { TokenStore } from './tokens.js';
import { Logger, type LogSink } from '../logging/logger.js';
import { RequestLog } from './request-log.js';

export interface ServerOptions {
  broker: Broker;
  tokens: TokenStore;
  /** Default 127.0.0.1: loopback only unless asked. */
  host?: string;
  /** Default 7878; 0 picks a free port. */
  port?: number;
  /** Where the server's lines go: one per request at info (refusals warn, faults error), its own troubles at warn. */
  log?: LogSink;
  /**
   * The metrics `GET /metrics` answers, already observing the broker (`berth serve` makes it
   * before its start-up orphan pass, so that pass is counted). Default: the server makes its own.
   */
  metrics?: ServerMetrics;
  /** The dashboard's overview streams: how often they update when nothing happens (default 5 s), how soon after a call, and at most how often. */
  overview?: { intervalMs?: number; soonMs?: number; minGapMs?: number };
}

const DEFAULT_PORT = 7878;

/**
 * `berth serve`: the HTTP API under /v1, MCP at /mcp and the dashboard at /, over one broker.
 * Every route but the page, the health check and the OpenAPI document needs a bearer token; the
 * token decides the tenant, which no request can name, and the profiles a request may name.
 *
 * @example
 * ```ts
 * await using broker = await Broker.open();
 * const server = await BerthServer.start({ broker, tokens: TokenStore.sharing(broker), port: 0 });
 * console.log(server.url); // http://127.0.0.1:PORT
 * await server.close({ graceMs: 10_000 }); // then broker.close()
 * ```
 */
export class BerthServer {
  private readonly http: Server;
  private readonly mcp: McpHttpHandler;
  private readonly callers = new WeakMap<IncomingMessage, Caller>();
  private readonly log: LogSink;
  private readonly logger: Logger;
  private readonly requests: RequestLog;
  private readonly stopObserving: () => void;
  private readonly dashboard: DashboardFeed;
  private readonly connections: ConnectionGuard;
  private inflight = 0;
  private draining = false;
  private closing: Promise<void> | undefined;
  private idle: (() => void) | undefined;

  private constructor(opts: ServerOptions) {
    this.log = opts.log ?? (() => undefined);
    this.logger = new Logger(opts.log, 'berth:server');
    this.requests = new RequestLog(this.logger, (req) => this.callers.get(req)?.tenant);
    const metrics = opts.metrics ?? new ServerMetrics(opts.broker);
    this.stopObserving = opts.metrics === undefined ? opts.broker.observe(metrics) : () => undefined;
    this.mcp = createMcpHttpHandler(opts.broker, {
      callerOf: (req) => this.callers.get(req), log: this.log, onRefused: (code, tenant) => metrics.refused({ code, tenant }),
      stillGrants: (authorization, caller) => opts.tokens.grantsStill(authorization, caller),
    });
    const edge = {
      refused: (o: { code: string; tenant: string | undefined }) => metrics.refused(o),
      render: () => metrics.render({ inflight: this.inflight, mcpSessions: this.mcp.sessionCount, connections: this.connections.open }),
    };
    this.dashboard = new DashboardFeed(opts.broker, this.logger, opts.overview);
    const app = createApp({
      broker: opts.broker, tokens: opts.tokens, mcp: this.mcp, callers: this.callers, metrics: edge, overview: this.dashboard.streams,
      draining: () => this.draining, tokensChanged: () => this.mcp.tokensChanged(), log: this.logger, faults: this.requests.faults,
    });
    // Bodies are read (or drained) by the app itself, from the Node request: the adapter must not
    // cut them short. The global Request and Response stay Node's own: berth may run inside an
    // application that relies on them.
    const listener = getRequestListener(app.hono.fetch, {
      overrideGlobalObjects: false, autoCleanupIncoming: false, hostname: 'localhost',
      errorHandler: (err) => this.adapterError(err),
    });
    const settings = opts.broker.config.server;
    this.connections = new ConnectionGuard(settings, {
      closed: (reason) => metrics.connectionClosed(reason), refused: (limit) => metrics.connectionRefused(limit),
    }, (m) => this.logger.warn(m));
    this.http = createServer(httpServerOptions(settings), (req, res) => {
      this.connections.request(req, res);
      this.requests.track(req, res);
      this.track(req, res);
      if (!app.direct(req, res)) void listener(req, res);
    });
    this.connections.attach(this.http);
  }

  /**
   * Binds and listens; resolves once connections are accepted.
   *
   * @throws ConfigError when a token may use a profile that runs on the host and the config does
   * not allow that (`server.allowHostBackend`).
   */
  static async start(opts: ServerOptions): Promise<BerthServer> {
    assertHostExposureAllowed(opts.broker.config, opts.tokens.list());
    const server = new BerthServer(opts);
    server.dashboard.start();
    await new Promise<void>((resolve, reject) => {
      server.http.once('error', reject);
      server.http.listen(opts.port ?? DEFAULT_PORT, opts.host ?? '127.0.0.1', () => {
        server.http.off('error', reject);
        resolve();
      });
    });
    return server;
  }

  get port(): number {
    return (this.http.address() as AddressInfo).port;
  }

  get url(): string {
    const a = this.http.address() as AddressInfo;
    const host = a.family === 'IPv6' ? `[${a.address}]` : a.address;
    return `http://${host}:${a.port}`;
  }

  /**
   * Stops accepting, lets in-flight requests finish within `graceMs`, ends the MCP sessions (and
   * their berth sessions), then drops what is left. Never throws; idempotent. The broker is the
   * caller's to close afterwards.
   */
  close(opts: { graceMs?: number } = {}): Promise<void> {
    this.closing ??= this.doClose(opts.graceMs ?? 10_000);
    return this.closing;
  }

  private async doClose(graceMs: number): Promise<void> {
    this.draining = true;
    this.dashboard.close();
    const closed = new Promise<void>((resolve) => this.http.close(() => resolve()));
    this.http.closeIdleConnections();
    if (this.inflight > 0) {
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([
        new Promise<void>((resolve) => (this.idle = resolve)),
        new Promise<void>((resolve) => (timer = setTimeout(resolve, graceMs))),
      ]);
      clearTimeout(timer);
    }
    await this.mcp.close().catch((e: unknown) => this.logger.warn(`closing MCP sessions: ${String(e)}`));
    this.http.closeAllConnections();
    await closed;
    this.stopObserving();
  }

  /**
   * Counts a request in flight until its response closed. An MCP client's GET /mcp is a
   * notification stream that stays open for the whole MCP session: it is no call to wait for at
   * shutdown (mcp.close() ends it), so it is not counted; nor is a dashboard's overview stream
   * (the dashboard feed ends those first).
   */
  private track(req: IncomingMessage, res: ServerResponse): void {
    const path = routingPath(req.url ?? '');
    if (req.method === 'GET' && (path === '/mcp' || path === '/v1/overview/stream')) return;
    this.inflight++;
    res.once('close', () => {
      this.inflight--;
      if (this.inflight === 0) this.idle?.();
    });
  }

  /** Overview streams open now and their pending timers (at most one each): both 0 once every client went away. */
  get overviewStreams(): { open: number; timers: number } {
    return { open: this.dashboard.streams.open, timers: this.dashboard.streams.timers };
  }

  /** What the adapter could not hand to the app: a request target or Host it cannot parse (400), or a bug (500). */
  private adapterError(err: unknown): Response {
    const e = err instanceof RequestError
      ? new HttpError('bad_request', `malformed request (${err.message}); send a path as the request target and a host name as Host`)
      : new HttpError('internal', 'berth failed to handle this request; the server log has the details');
    if (!(err instanceof RequestError)) this.logger.error('the HTTP adapter failed', { stack: err instanceof Error ? err.stack ?? err.message : String(err) });
    return new Response(errorBody(e), { status: e.status, headers: { 'content-type': 'application/json; charset=utf-8', 'cache-control': 'no-store', connection: 'close' } });
  }
}
