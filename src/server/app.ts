import type { IncomingMessage, ServerResponse } from 'node:http';
import { RESPONSE_ALREADY_SENT } from '@hono/node-server/utils/response';
import { Hono, type MiddlewareHandler } from 'hono';
import { routePath } from 'hono/route';
import type { Broker } from '../broker/broker.js';
import { isBerthError } from '../errors.js';
import { adapterTakesAsIs, DirectContext } from './direct-route.js';
import { answers, JSON_HEADERS } from './answer.js';
import type { ApiContext, ApiEnv } from './api-env.js';
import type { Caller } from './caller.js';
import { apiHandlers } from './handlers.js';
import { errorBody, HttpError, isRefusal, toHttpError } from './http-error.js';
import { pathOf } from './request.js';
import { holdsCallSlot, honoPath, readInput, type RouteSpec } from './route-spec.js';
import { openApiDocument, ROUTES, type RouteId } from './routes.js';
import type { MetricsEdge } from './metrics.js';
import type { OverviewStreams } from './overview-stream.js';
import type { Logger } from '../logging/logger.js';
import type { RequestFault } from './request-log.js';
import { TenantLimiter } from './tenant-limits.js';
import type { TokenGrant, TokenStore } from './tokens.js';

export interface AppDeps {
  broker: Broker;
  tokens: TokenStore;
  /** `/mcp`: the MCP streamable-HTTP handler, on the raw request and response. */
  mcp: (req: IncomingMessage, res: ServerResponse) => Promise<void>;
  /** Remembers each authenticated request's caller (the MCP handler looks it up). */
  callers: WeakMap<IncomingMessage, Caller>;
  /** `GET /metrics`, and told of every refusal answered. */
  metrics: MetricsEdge;
  /** `GET /v1/overview/stream`: the dashboard's open streams. */
  overview: OverviewStreams;
  /** The server is shutting down: new requests get 503 and every answer closes its connection. */
  draining: () => boolean;
  /**
   * A request saw that the tokens changed since the last one did (`TokenStore.generation`): told
   * before the request is served, so what a revoked token held (an MCP session) is let go first.
   */
  tokensChanged: () => void;
  log: Logger;
  /** Where the error answer leaves what went wrong, for the request's line (`RequestLog`). */
  faults: WeakMap<IncomingMessage, RequestFault>;
}

/** An authenticated route once routed, given its path parameters. */
type Serve = (c: ApiContext, params: Record<string, string>) => Promise<Response>;

/** The HTTP API: Hono's app, and the routes served without it. */
export interface ApiApp {
  /** Every route of `ROUTES`, 404 and 405, through the Node adapter (`getRequestListener`). */
  hono: Hono<ApiEnv>;
  /**
   * Serves a request whose method and path name an authenticated route with a fixed path (the
   * hot ones: `POST /v1/exec` and the like) without Hono and its adapter, through the same
   * checks, handler and error answers; false for any other request (then hand it to `hono`).
   */
  direct(req: IncomingMessage, res: ServerResponse): boolean;
}

/**
 * The HTTP API on Hono: every route of `ROUTES` with its handler, one error handler that answers
 * by the code's status (`statusOf`), 404 and 405 (with `Allow`) as JSON. A route that needs a
 * token checks it before anything of the request is read; so do 404 and 405, which tell nothing
 * to a caller without one.
 */
export function createApp(deps: AppDeps): ApiApp {
  const app = new Hono<ApiEnv>({ getPath: (_req, opts) => routingPath(opts?.env?.incoming.url ?? '') });
  const limiter = new TenantLimiter(() => deps.broker.config.limits);
  const answer = answers(deps.draining);
  let doc: Record<string, unknown> | undefined;
  const handlers = apiHandlers({
    broker: deps.broker, limiter, answer,
    mcp: (c) => deps.mcp(c.env.incoming, c.env.outgoing),
    metrics: deps.metrics,
    overview: deps.overview,
    stillGrants: (authorization, caller) => deps.tokens.grantsStill(authorization, caller),
    openApi: () => (doc ??= openApiDocument()),
  });

  // Every request looks its token up, or (a public route) looks whether the tokens changed: the
  // one that sees a change tells `tokensChanged`, whichever route it is for.
  let generation = deps.tokens.generation;
  const noticeChanges = (): void => {
    if (deps.tokens.generation === generation) return;
    generation = deps.tokens.generation;
    deps.tokensChanged();
  };
  const grantOf = (c: ApiContext): TokenGrant | undefined => {
    const grant = deps.tokens.grantOf(c.env.incoming.headers.authorization);
    noticeChanges();
    return grant;
  };
  const publicRoute: MiddlewareHandler<ApiEnv> = async (_c, next) => {
    deps.tokens.refresh();
    noticeChanges();
    await next();
  };

  const callerOf = (c: ApiContext): Caller => {
    const grant = grantOf(c);
    if (grant === undefined) {
      throw new HttpError('unauthorized', 'missing or invalid bearer token; send Authorization: Bearer <token> (berth token create --tenant T)', {
        'www-authenticate': 'Bearer realm="berth"',
      });
    }
    if (grant.metrics === true) {
      throw new HttpError('policy_refused', 'this is a metrics token: it may read GET /metrics and nothing else; use a tenant token (berth token create --tenant T)');
    }
    const caller: Caller = { tenant: grant.tenant, profiles: grant.profiles, token: grant.name === undefined ? { id: grant.id } : { id: grant.id, name: grant.name } };
    deps.callers.set(c.env.incoming, caller);
    return caller;
  };

  /** `/metrics` counts every tenant's calls: only a metrics token reads it, never a tenant's. */
  const authenticateMetrics: MiddlewareHandler<ApiEnv> = async (c, next) => {
    const grant = grantOf(c);
    if (grant === undefined) {
      throw new HttpError('unauthorized', 'missing or invalid bearer token; send Authorization: Bearer <metrics token> (berth token create --metrics)', {
        'www-authenticate': 'Bearer realm="berth"',
      });
    }
    if (grant.metrics !== true) {
      throw new HttpError('policy_refused', 'a tenant token may not read /metrics (it counts every tenant\'s calls); create a metrics token with berth token create --metrics');
    }
    await next();
  };

  const errorAnswer = async (c: ApiContext, err: unknown): Promise<Response> => {
    const e = toHttpError(err);
    if (isRefusal(e.code)) deps.metrics.refused({ code: e.code, tenant: c.get('caller')?.tenant });
    if (e.status < 500 || err instanceof HttpError) deps.faults.set(c.env.incoming, { code: e.code });
    else {
      // One line for what a sandbox or an engine did (a tenant can repeat it at will); a stack
      // only for berth's own faults, which are rare and need it.
      deps.faults.set(c.env.incoming, isBerthError(err) && err.code !== 'internal'
        ? { code: e.code, error: `${err.code}: ${err.message}` }
        : { code: e.code, error: `internal: ${err instanceof Error ? err.message : String(err)}`, stack: err instanceof Error ? err.stack : undefined });
    }
    if (c.env.outgoing.headersSent) {
      c.env.outgoing.end();
      return RESPONSE_ALREADY_SENT;
    }
    return answer.bytes(c, e.status, errorBody(e), { ...JSON_HEADERS, ...e.headers });
  };

  /** Runs `work` holding one of the tenant's call slots when the route says its requests hold one (`RouteSpec.callSlot`). */
  const limited = async (spec: RouteSpec, c: ApiContext, work: () => Promise<Response>): Promise<Response> => {
    if (!holdsCallSlot(spec, c.env.incoming.method ?? '')) return work();
    const release = limiter.enterCall(c.get('caller').tenant);
    const res = c.env.outgoing;
    const closed = new Promise<void>((resolve) => (res.closed ? resolve() : res.once('close', () => resolve())));
    try {
      return await work();
    } finally {
      void closed.then(release);
    }
  };

  /**
   * An authenticated route once routed: the token before anything else is looked at or read (no
   * valid token, nothing touched), a call slot, the checked input, the handler. Hono's routes and
   * the direct ones run this same function.
   */
  const authenticated = (spec: RouteSpec, handler: (c: ApiContext, input: unknown) => Promise<Response>): Serve =>
    async (c, params) => {
      c.set('caller', callerOf(c));
      return limited(spec, c, async () => handler(c, await readInput(spec, c.env.incoming, params)));
    };

  const allowed = new Map<string, string[]>();
  const methodNotAllowed = (c: ApiContext, methods: string[]): HttpError =>
    new HttpError('method_not_allowed', `${c.env.incoming.method ?? ''} is not allowed on ${pathOf(c.env.incoming.url ?? '')}; use ${methods.join(', ')}`, {
      allow: methods.join(', '),
    });

  const publicGets = new Set<string>();
  app.use('*', async (c, next) => {
    if (deps.draining()) throw shuttingDown();
    const target = c.env.incoming.url ?? '';
    if (!target.startsWith('/')) throw new HttpError('bad_request', 'the request target must be a path');
    // No route has a segment that does not decode (a path parameter is decoded before it is checked).
    if (!decodes(pathOf(target))) {
      callerOf(c);
      throw notFound(c);
    }
    // Hono answers HEAD with the GET route. A public GET route (the dashboard page, health, the
    // OpenAPI document) answers HEAD as it answers GET, without the body; any other route serves no
    // HEAD, so it is refused as any other method a route does not serve (after the token, like every 405).
    const methods = allowed.get(routePath(c, -1));
    if (c.env.incoming.method === 'HEAD' && methods !== undefined && !publicGets.has(routePath(c, -1))) {
      callerOf(c);
      throw methodNotAllowed(c, methods);
    }
    await next();
  });

  const direct = new Map<string, Serve>();
  for (const [id, spec] of Object.entries(ROUTES) as [RouteId, RouteSpec][]) {
    const handler = handlers[id] as (c: ApiContext, input: unknown) => Promise<Response>;
    const path = honoPath(spec.path);
    const method = spec.method.toUpperCase();
    const answer: MiddlewareHandler<ApiEnv> = async (c) => handler(c, await readInput(spec, c.env.incoming, c.req.param()));
    if (spec.public === true) {
      app.on(method, path, publicRoute, answer);
      if (method === 'GET') publicGets.add(path);
    }
    else if (spec.metricsOnly === true) app.on(method, path, authenticateMetrics, answer);
    else {
      const serve = authenticated(spec, handler);
      app.on(method, path, async (c) => serve(c, c.req.param()));
      // `/mcp` (every method) is served directly for the methods it documents; any other goes to Hono.
      const methods = spec.method === 'all' ? (spec.methods ?? []).map((m) => m.toUpperCase()) : [method];
      if (spec.params === undefined) for (const m of methods) direct.set(`${m} ${path}`, serve);
    }
    if (spec.method !== 'all') allowed.set(path, [...(allowed.get(path) ?? []), method]);
  }
  for (const [path, methods] of allowed) {
    app.all(path, async (c) => {
      c.set('caller', callerOf(c));
      throw methodNotAllowed(c, methods);
    });
  }
  app.notFound(async (c) => {
    try {
      callerOf(c);
    } catch (err) {
      return errorAnswer(c, err);
    }
    return errorAnswer(c, notFound(c));
  });
  app.onError((err, c) => errorAnswer(c, err));

  const NO_PARAMS: Record<string, string> = {};
  const serveDirect = async (c: ApiContext, serve: Serve): Promise<void> => {
    try {
      // The checks of the first middleware (app.use('*')) that such a request can fail.
      if (deps.draining()) throw shuttingDown();
      await serve(c, NO_PARAMS);
    } catch (err) {
      await errorAnswer(c, err);
    }
  };
  return {
    hono: app,
    direct: (req, res) => {
      // A target of plain characters that names such a route also starts with `/` and decodes:
      // the first middleware's other checks pass, and Hono would route it to this same route.
      const serve = direct.get(`${req.method ?? ''} ${routingPath(req.url ?? '')}`);
      if (serve === undefined || !adapterTakesAsIs(req)) return false;
      serveDirect(new DirectContext(req, res), serve).catch((err: unknown) => {
        deps.log.error(`${req.method ?? ''} ${pathOf(req.url ?? '')}: answering an error failed`, { stack: err instanceof Error ? err.stack : String(err) });
        res.destroy();
      });
      return true;
    },
  };
}

function shuttingDown(): HttpError {
  return new HttpError('shutting_down', 'berth is shutting down; retry on a running berth');
}

function notFound(c: ApiContext): HttpError {
  return new HttpError('not_found', `no route ${pathOf(c.env.incoming.url ?? '')}; see /v1/openapi.json`);
}

/**
 * The path routes are matched against: the request target's path as sent, not decoded (so
 * `/v1/%6aobs` is no route), with empty segments dropped (`/v1//health/` is `/v1/health`).
 */
export function routingPath(target: string): string {
  return `/${pathOf(target).split('/').filter((s) => s !== '').join('/')}`;
}

function decodes(path: string): boolean {
  try {
    decodeURIComponent(path);
    return true;
  } catch {
    return false;
  }
}
