import type { ServerResponse } from 'node:http';
import type { Broker, BrokerExecResult } from '../broker/broker.js';
import { normalizeScope } from '../scope/normalize.js';
import type { CallScope } from '../scope/call-scope.js';
import { assertNotOnHost, assertProfileAllowed } from './caller.js';
import { DASHBOARD_HTML, dashboardHeaders } from './dashboard.js';
import { downloadRoute, exportIdOf, sendExport } from './export-download.js';
import { toHttpError } from './http-error.js';
import { openApiDocument } from './openapi.js';
import { declaredLength, parseJsonBody, parseQuery, readBody } from './request.js';
import { remoteBinding, remoteSandbox } from './remote-view.js';
import type { RequestContext, Route } from './router.js';
import {
  AuditQuery, EmptyQuery, ExecBody, ExportBody, ExportIdParam, FileGetQuery, FilePutQuery, JobIdParam, JobReadQuery, JobStartBody, parseInput,
  ScopeBody, ScopeQuery, scopeOf, type ScopeFields,
} from './schemas.js';
import { TenantLimiter } from './tenant-limits.js';

/** Largest JSON body (a command, a scope). Uploads (`PUT /v1/files`) are streamed, capped by `files.maxBytes`. */
export const MAX_JSON_BYTES = 1024 * 1024;

export interface RouteDeps {
  broker: Broker;
  /** `/mcp`: the MCP engineer's streamable-HTTP handler. */
  mcp: (ctx: RequestContext) => Promise<void>;
}

async function jsonBody(ctx: RequestContext): Promise<unknown> {
  return parseJsonBody(ctx.req, await readBody(ctx.req, MAX_JSON_BYTES));
}

function query(ctx: RequestContext): Record<string, string> {
  return parseQuery(ctx.search);
}

/** What a command result looks like over HTTP: the library's, without the host path of spilled output. */
function execResult(r: BrokerExecResult): Omit<BrokerExecResult, 'fullOutputPath'> {
  const { fullOutputPath: _hostPath, ...rest } = r;
  return rest;
}

/** Accept: text/event-stream asks for the streaming form of POST /v1/exec. */
function wantsStream(ctx: RequestContext): boolean {
  const accept = ctx.req.headers.accept ?? '';
  return /(^|,)\s*text\/event-stream\s*(;|,|$)/i.test(accept);
}

function sse(res: ServerResponse, event: string, data: unknown): void {
  if (res.destroyed) return;
  res.write(`event: ${event}\ndata: ${JSON.stringify(data)}\n\n`);
}

/**
 * Aborts when the client goes away before the answer was sent: the command is cancelled (its
 * tree killed as on a timeout, exit code 130 in the audit), so it neither runs on unseen nor
 * holds the session's next call.
 */
function clientGone(res: ServerResponse): AbortSignal {
  const ac = new AbortController();
  res.once('close', () => {
    if (!res.writableEnded) ac.abort();
  });
  return ac.signal;
}

/**
 * Runs the command and streams it: `stdout`/`stderr` events (data: the chunk as a JSON string)
 * in arrival order, then one `result` event with the full result (so a client may ignore the
 * chunks), or one `error` event. Bad input is refused before the stream starts, as plain JSON.
 * A client that disconnects cancels the command.
 */
async function streamExec(ctx: RequestContext, broker: Broker, scope: CallScope, body: { command: string; timeoutSeconds?: number; workdir?: string; stdin?: string }): Promise<undefined> {
  const { res } = ctx;
  res.writeHead(200, {
    'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-store', 'x-accel-buffering': 'no',
  });
  res.flushHeaders();
  const signal = clientGone(res);
  try {
    const r = await broker.exec(scope, body.command, {
      timeoutSeconds: body.timeoutSeconds, workdir: body.workdir, stdin: body.stdin, signal,
      onChunk: (stream, chunk) => sse(res, stream, chunk),
    });
    sse(res, 'result', execResult(r));
  } catch (err) {
    const e = toHttpError(err);
    sse(res, 'error', { error: { code: e.code, message: e.message, status: e.status } });
  }
  res.end();
  return undefined;
}

/** An MCP client's GET /mcp is its standing notification stream for the whole MCP session, not a call. */
function isStandingStream(route: Route, ctx: RequestContext): boolean {
  return route.path === '/mcp' && ctx.req.method === 'GET';
}

/**
 * A route whose calls count against the tenant's `limits.concurrentCalls`. A call holds its slot
 * until its handler settled and its response closed: a client that hangs up does not free the
 * slot of work still running for it, and an MCP answer sent after the handler returned is covered.
 */
function limited(route: Route, limiter: TenantLimiter): Route {
  if (!route.auth) return route;
  return {
    ...route,
    handler: async (ctx) => {
      if (isStandingStream(route, ctx)) return route.handler(ctx);
      const release = limiter.enterCall(ctx.tenant);
      const closed = new Promise<void>((resolve) => {
        if (ctx.res.closed) resolve();
        else ctx.res.once('close', () => resolve());
      });
      try {
        return await route.handler(ctx);
      } finally {
        void closed.then(release);
      }
    },
  };
}

export function apiRoutes(deps: RouteDeps): Route[] {
  const { broker } = deps;
  const limiter = new TenantLimiter(() => broker.config.limits);

  /**
   * The call scope of a request: the token's tenant plus the request's fields, checked by the
   * library's rules (400), then against the token's profiles and the host backend rule (403).
   */
  const scoped = (ctx: RequestContext, fields: ScopeFields): CallScope => {
    const scope = scopeOf(ctx.tenant, fields);
    assertProfileAllowed(ctx, scope.profile);
    assertNotOnHost(broker, scope);
    return scope;
  };

  const exec = async (ctx: RequestContext, stream: boolean) => {
    const body = parseInput(ExecBody, await jsonBody(ctx), 'body');
    const scope = scoped(ctx, body);
    if (stream) return streamExec(ctx, broker, scope, body);
    const r = await broker.exec(scope, body.command, {
      timeoutSeconds: body.timeoutSeconds, workdir: body.workdir, stdin: body.stdin, signal: clientGone(ctx.res),
    });
    return { body: execResult(r) };
  };

  const routes: Route[] = [
    {
      method: 'GET', path: '/', auth: false,
      handler: async ({ res }) => {
        res.writeHead(200, dashboardHeaders()).end(DASHBOARD_HTML);
        return undefined;
      },
    },
    { method: 'GET', path: '/v1/health', auth: false, handler: async () => ({ body: { ok: true } }) },
    { method: 'GET', path: '/v1/openapi.json', auth: false, handler: async () => ({ body: openApiDocument() }) },
    {
      method: 'GET', path: '/v1/whoami', auth: true,
      handler: async (ctx) => {
        parseInput(EmptyQuery, query(ctx), 'query');
        return { body: { tenant: ctx.tenant, profiles: ctx.profiles } };
      },
    },
    {
      method: 'POST', path: '/v1/explain', auth: true,
      handler: async (ctx) => {
        const body = parseInput(ScopeBody, await jsonBody(ctx), 'body');
        return { body: remoteBinding(broker.explain(scoped(ctx, body))) };
      },
    },
    { method: 'POST', path: '/v1/exec', auth: true, handler: (ctx) => exec(ctx, wantsStream(ctx)) },
    { method: 'POST', path: '/v1/exec/stream', auth: true, handler: (ctx) => exec(ctx, true) },
    {
      method: 'POST', path: '/v1/sessions/close', auth: true,
      handler: async (ctx) => {
        const body = parseInput(ScopeBody, await jsonBody(ctx), 'body');
        return { body: await broker.closeSession(scoped(ctx, body)) };
      },
    },
    {
      method: 'GET', path: '/v1/sandboxes', auth: true,
      handler: async (ctx) => {
        parseInput(EmptyQuery, query(ctx), 'query');
        // Only the token's profiles; a shared:* sandbox belongs to no profile and stays visible.
        const list = await broker.listWithState(ctx.tenant);
        return { body: list.filter((s) => s.profile === null || ctx.profiles.includes(s.profile)).map(remoteSandbox) };
      },
    },
    {
      method: 'GET', path: '/v1/audit', auth: true,
      handler: async (ctx) => {
        const q = parseInput(AuditQuery, query(ctx), 'query');
        // The filters follow the scope rules too: a session or user no call could carry is bad input.
        const { session, user } = normalizeScope({ tenant: ctx.tenant, session: q.session, user: q.user });
        return { body: broker.audit({ tenant: ctx.tenant, profiles: ctx.profiles, session, user, limit: q.limit ?? 100 }) };
      },
    },
    {
      method: 'POST', path: '/v1/jobs', auth: true,
      handler: async (ctx) => {
        const body = parseInput(JobStartBody, await jsonBody(ctx), 'body');
        const r = await broker.jobs.start(scoped(ctx, body), body.command, { workdir: body.workdir });
        return { status: 201, body: r };
      },
    },
    {
      method: 'GET', path: '/v1/jobs', auth: true,
      handler: async (ctx) => {
        const q = parseInput(ScopeQuery, query(ctx), 'query');
        return { body: await broker.jobs.list(scoped(ctx, q)) };
      },
    },
    {
      method: 'GET', path: '/v1/jobs/:id', auth: true,
      handler: async (ctx) => {
        const id = parseInput(JobIdParam, ctx.params['id'], 'query');
        const { offset, maxBytes, ...scope } = parseInput(JobReadQuery, query(ctx), 'query');
        return { body: await broker.jobs.read(scoped(ctx, scope), id, { offset, maxBytes }) };
      },
    },
    {
      method: 'DELETE', path: '/v1/jobs/:id', auth: true,
      handler: async (ctx) => {
        const id = parseInput(JobIdParam, ctx.params['id'], 'query');
        const q = parseInput(ScopeQuery, query(ctx), 'query');
        return { body: await broker.jobs.kill(scoped(ctx, q), id) };
      },
    },
    {
      method: 'PUT', path: '/v1/files', auth: true,
      handler: async (ctx) => {
        const { path, ...scope } = parseInput(FilePutQuery, query(ctx), 'query');
        const s = scoped(ctx, scope);
        const size = declaredLength(ctx.req);
        // Bytes in flight are what a tenant could make the server hold; streaming keeps each
        // upload to a few chunks in memory, and this bounds how many of them one tenant runs.
        const release = limiter.reserveBytes(ctx.tenant, size);
        try {
          return { status: 201, body: await broker.files.uploadStream(s, { path, size, stream: ctx.req }) };
        } finally {
          release();
        }
      },
    },
    {
      method: 'GET', path: '/v1/files', auth: true,
      handler: async (ctx) => {
        const { path, maxBytes, ...scope } = parseInput(FileGetQuery, query(ctx), 'query');
        const r = await broker.files.readFile(scoped(ctx, scope), { path, maxBytes });
        ctx.res.writeHead(200, {
          'content-type': 'application/octet-stream', 'content-length': String(r.data.length),
          'x-berth-path': encodeURIComponent(r.path), 'cache-control': 'no-store',
        }).end(r.data);
        return undefined;
      },
    },
    {
      method: 'POST', path: '/v1/files/export', auth: true,
      handler: async (ctx) => {
        const { path, maxBytes, ...fields } = parseInput(ExportBody, await jsonBody(ctx), 'body');
        const scope = scoped(ctx, fields);
        const r = await broker.files.exportPath(scope, { path, maxBytes });
        // A remote caller gets a route to download the export, never its host path.
        const exportId = exportIdOf(r.hostPath);
        return { body: { exportId, download: downloadRoute(exportId, scope), bytes: r.bytes, kind: r.kind } };
      },
    },
    {
      method: 'GET', path: '/v1/files/exports/:id', auth: true,
      handler: async (ctx) => {
        const q = parseInput(ScopeQuery, query(ctx), 'query');
        const scope = scoped(ctx, q);
        await sendExport(ctx.res, broker.berthHome, scope, parseInput(ExportIdParam, ctx.params['id'], 'path'));
        return undefined;
      },
    },
    {
      method: '*', path: '/mcp', auth: true,
      handler: async (ctx) => {
        await deps.mcp(ctx);
        return undefined;
      },
    },
  ];
  return routes.map((r) => limited(r, limiter));
}
