import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import type { Broker } from '../broker/broker.js';
import { assertHostExposureAllowed, type Caller } from './caller.js';
import { createMcpHttpHandler, type McpHttpHandler } from './mcp/http.js';
import { errorBody, HttpError, toHttpError } from './http-error.js';
import { apiRoutes } from './routes.js';
import { Router, type RequestContext } from './router.js';
import type { TokenStore } from './tokens.js';

export interface ServerOptions {
  broker: Broker;
  tokens: TokenStore;
  /** Default 127.0.0.1: loopback only unless asked. */
  host?: string;
  /** Default 7878; 0 picks a free port. */
  port?: number;
  log?: (namespace: string, message: string) => void;
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
 * const server = await BerthServer.start({ broker, tokens: TokenStore.open(broker.berthHome), port: 0 });
 * console.log(server.url); // http://127.0.0.1:PORT
 * await server.close({ graceMs: 10_000 }); // then broker.close()
 * ```
 */
/** How long a refused request body is drained before the answer goes out regardless. */
const DRAIN_MS = 5_000;

export class BerthServer {
  readonly router = new Router();
  private readonly http: Server;
  private readonly mcp: McpHttpHandler;
  private readonly callers = new WeakMap<IncomingMessage, Caller>();
  private readonly log: (namespace: string, message: string) => void;
  private inflight = 0;
  private draining = false;
  private closing: Promise<void> | undefined;
  private idle: (() => void) | undefined;

  private constructor(private readonly opts: ServerOptions) {
    this.log = opts.log ?? (() => undefined);
    this.mcp = createMcpHttpHandler(opts.broker, { callerOf: (req) => this.callers.get(req), log: this.log });
    for (const route of apiRoutes({ broker: opts.broker, mcp: ({ req, res }) => this.mcp(req, res) })) this.router.add(route);
    this.http = createServer({ requestTimeout: 0 }, (req, res) => void this.handle(req, res));
    this.http.on('clientError', (err: NodeJS.ErrnoException, socket: Socket) => {
      if (!socket.writable) {
        socket.destroy();
        return;
      }
      const status = err.code === 'HPE_HEADER_OVERFLOW' ? 431 : 400;
      const body = errorBody(new HttpError('bad_request', `malformed HTTP request (${err.code ?? 'parse error'})`));
      socket.end(`HTTP/1.1 ${status} Bad Request\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`);
    });
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
    await this.mcp.close().catch((e: unknown) => this.log('berth:server', `closing MCP sessions: ${String(e)}`));
    this.http.closeAllConnections();
    await closed;
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    // An MCP client's GET /mcp is a notification stream that stays open for the whole MCP session:
    // it is no call to wait for at shutdown (mcp.close() ends it), so it is not counted in flight.
    const stream = req.method === 'GET' && (req.url ?? '').split('?')[0] === '/mcp';
    if (!stream) {
      this.inflight++;
      res.once('close', () => {
        this.inflight--;
        if (this.inflight === 0) this.idle?.();
      });
    }
    try {
      if (this.draining) throw new HttpError('shutting_down', 'berth is shutting down; retry on a running berth');
      const url = req.url ?? '';
      if (!url.startsWith('/')) throw new HttpError('bad_request', 'the request target must be a path');
      const q = url.indexOf('?');
      const pathname = q === -1 ? url : url.slice(0, q);
      const search = q === -1 ? '' : url.slice(q);
      const method = req.method ?? '';
      const match = this.router.match(method, pathname);
      const isPublic = match.kind === 'found' && !match.route.auth;
      let caller: Caller = { tenant: '', profiles: [] };
      if (!isPublic) {
        // Before anything else is looked at or read: no valid token, nothing touched.
        const grant = this.opts.tokens.grantOf(req.headers.authorization);
        if (grant === undefined) {
          throw new HttpError('unauthorized', 'missing or invalid bearer token; send Authorization: Bearer <token> (berth token create --tenant T)', {
            'www-authenticate': 'Bearer realm="berth"',
          });
        }
        caller = { tenant: grant.tenant, profiles: grant.profiles };
        this.callers.set(req, caller);
      }
      if (match.kind === 'not_found') throw new HttpError('not_found', `no route ${pathname}; see /v1/openapi.json`);
      if (match.kind === 'method_not_allowed') {
        throw new HttpError('method_not_allowed', `${method} is not allowed on ${pathname}; use ${match.allow.join(', ')}`, { allow: match.allow.join(', ') });
      }
      const ctx: RequestContext = { req, res, tenant: caller.tenant, profiles: caller.profiles, params: match.params, search };
      const out = await match.route.handler(ctx);
      if (out !== undefined) this.sendJson(req, res, out.status ?? 200, JSON.stringify(out.body));
    } catch (err) {
      const e = toHttpError(err);
      if (e.status >= 500 && !(err instanceof HttpError)) this.log('berth:server', `${req.method} ${req.url?.split('?')[0]}: ${err instanceof Error ? err.stack ?? err.message : String(err)}`);
      if (res.headersSent) {
        res.end();
        return;
      }
      for (const [k, v] of Object.entries(e.headers)) res.setHeader(k, v);
      this.sendJson(req, res, e.status, errorBody(e));
    }
  }

  private sendJson(req: IncomingMessage, res: ServerResponse, status: number, text: string): void {
    const headers: Record<string, string> = {
      'content-type': 'application/json; charset=utf-8', 'content-length': String(Buffer.byteLength(text)), 'cache-control': 'no-store',
    };
    if (this.draining) headers['connection'] = 'close';
    if (req.complete || req.destroyed) {
      res.writeHead(status, headers).end(text);
      return;
    }
    // A body we refused early is drained before answering: closing the socket while the client
    // still sends would reset the connection and the client would never read its 4xx. A client
    // that keeps sending past DRAIN_MS gets the answer anyway, and the connection closes.
    headers['connection'] = 'close';
    let sent = false;
    const send = (): void => {
      if (sent) return;
      sent = true;
      clearTimeout(timer);
      res.writeHead(status, headers).end(text);
    };
    const timer = setTimeout(send, DRAIN_MS);
    req.once('end', send);
    req.once('error', send);
    req.resume();
  }
}
