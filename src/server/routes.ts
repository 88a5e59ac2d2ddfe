import type { ServerResponse } from 'node:http';
import type { Broker, BrokerExecResult } from '../broker/broker.js';
import type { CallScope } from '../scope/call-scope.js';
import { DASHBOARD_HTML, dashboardHeaders } from './dashboard.js';
import { HttpError, toHttpError } from './http-error.js';
import { openApiDocument } from './openapi.js';
import { parseJsonBody, parseQuery, readBody } from './request.js';
import type { RequestContext, Route } from './router.js';
import {
  AuditQuery, EmptyQuery, ExecBody, ExportBody, FileGetQuery, FilePutQuery, JobIdParam, JobReadQuery, JobStartBody, parseInput,
  ScopeBody, ScopeQuery, scopeOf,
} from './schemas.js';

/** Largest JSON body (a command, a scope). */
export const MAX_JSON_BYTES = 1024 * 1024;
/** Largest raw upload (`PUT /v1/files`); the config's own file caps apply on top. */
export const MAX_UPLOAD_BYTES = 64 * 1024 * 1024;

/** The files API (issue 4); called only where the broker has it. */
interface FilesApi {
  upload(scope: CallScope, input: { path: string; data: Buffer }): Promise<{ path: string; bytes: number }>;
  readFile(scope: CallScope, input: { path: string; maxBytes?: number }): Promise<{ path: string; data: Buffer }>;
  exportPath(scope: CallScope, input: { path: string; maxBytes?: number }): Promise<{ hostPath: string; bytes: number; kind: string }>;
}

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

function files(broker: Broker, method: keyof FilesApi): FilesApi {
  const api = broker as unknown as Partial<FilesApi>;
  if (typeof api[method] !== 'function') {
    throw new HttpError(501, 'not_implemented', `this berth has no ${method} yet`);
  }
  return api as FilesApi;
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

export function apiRoutes(deps: RouteDeps): Route[] {
  const { broker } = deps;

  const exec = async (ctx: RequestContext, stream: boolean) => {
    const body = parseInput(ExecBody, await jsonBody(ctx), 'body');
    const scope = scopeOf(ctx.tenant, body);
    if (stream) return streamExec(ctx, broker, scope, body);
    const r = await broker.exec(scope, body.command, {
      timeoutSeconds: body.timeoutSeconds, workdir: body.workdir, stdin: body.stdin, signal: clientGone(ctx.res),
    });
    return { body: execResult(r) };
  };

  return [
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
        return { body: { tenant: ctx.tenant } };
      },
    },
    {
      method: 'POST', path: '/v1/explain', auth: true,
      handler: async (ctx) => {
        const body = parseInput(ScopeBody, await jsonBody(ctx), 'body');
        return { body: broker.explain(scopeOf(ctx.tenant, body)) };
      },
    },
    { method: 'POST', path: '/v1/exec', auth: true, handler: (ctx) => exec(ctx, wantsStream(ctx)) },
    { method: 'POST', path: '/v1/exec/stream', auth: true, handler: (ctx) => exec(ctx, true) },
    {
      method: 'POST', path: '/v1/sessions/close', auth: true,
      handler: async (ctx) => {
        const body = parseInput(ScopeBody, await jsonBody(ctx), 'body');
        return { body: await broker.closeSession(scopeOf(ctx.tenant, body)) };
      },
    },
    {
      method: 'GET', path: '/v1/sandboxes', auth: true,
      handler: async (ctx) => {
        parseInput(EmptyQuery, query(ctx), 'query');
        return { body: await broker.listWithState(ctx.tenant) };
      },
    },
    {
      method: 'GET', path: '/v1/audit', auth: true,
      handler: async (ctx) => {
        const q = parseInput(AuditQuery, query(ctx), 'query');
        // The filters follow the scope rules too: a session or user no call could carry is bad input.
        const { session, user } = scopeOf(ctx.tenant, { session: q.session, user: q.user });
        return { body: broker.audit({ tenant: ctx.tenant, session, user, limit: q.limit ?? 100 }) };
      },
    },
    {
      method: 'POST', path: '/v1/jobs', auth: true,
      handler: async (ctx) => {
        const body = parseInput(JobStartBody, await jsonBody(ctx), 'body');
        const r = await broker.startJob(scopeOf(ctx.tenant, body), body.command, { workdir: body.workdir });
        return { status: 201, body: r };
      },
    },
    {
      method: 'GET', path: '/v1/jobs', auth: true,
      handler: async (ctx) => {
        const q = parseInput(ScopeQuery, query(ctx), 'query');
        return { body: await broker.listJobs(scopeOf(ctx.tenant, q)) };
      },
    },
    {
      method: 'GET', path: '/v1/jobs/:id', auth: true,
      handler: async (ctx) => {
        const id = parseInput(JobIdParam, ctx.params['id'], 'query');
        const { offset, maxBytes, ...scope } = parseInput(JobReadQuery, query(ctx), 'query');
        return { body: await broker.readJob(scopeOf(ctx.tenant, scope), id, { offset, maxBytes }) };
      },
    },
    {
      method: 'DELETE', path: '/v1/jobs/:id', auth: true,
      handler: async (ctx) => {
        const id = parseInput(JobIdParam, ctx.params['id'], 'query');
        const q = parseInput(ScopeQuery, query(ctx), 'query');
        return { body: await broker.killJob(scopeOf(ctx.tenant, q), id) };
      },
    },
    {
      method: 'PUT', path: '/v1/files', auth: true,
      handler: async (ctx) => {
        const { path, ...scope } = parseInput(FilePutQuery, query(ctx), 'query');
        const api = files(broker, 'upload');
        const s = scopeOf(ctx.tenant, scope);
        const data = await readBody(ctx.req, MAX_UPLOAD_BYTES);
        return { status: 201, body: await api.upload(s, { path, data }) };
      },
    },
    {
      method: 'GET', path: '/v1/files', auth: true,
      handler: async (ctx) => {
        const { path, maxBytes, ...scope } = parseInput(FileGetQuery, query(ctx), 'query');
        const r = await files(broker, 'readFile').readFile(scopeOf(ctx.tenant, scope), { path, maxBytes });
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
        const { path, maxBytes, ...scope } = parseInput(ExportBody, await jsonBody(ctx), 'body');
        return { body: await files(broker, 'exportPath').exportPath(scopeOf(ctx.tenant, scope), { path, maxBytes }) };
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
}
