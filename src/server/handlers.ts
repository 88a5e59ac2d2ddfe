import type { Socket } from 'node:net';
import { RESPONSE_ALREADY_SENT } from '@hono/node-server/utils/response';
import type { Broker, BrokerExecResult } from '../broker/broker.js';
import { normalizeScope } from '../scope/normalize.js';
import type { CallScope } from '../scope/call-scope.js';
import type { Answers } from './answer.js';
import type { ApiContext } from './api-env.js';
import { assertNotOnHost, assertProfileAllowed, type Caller } from './caller.js';
import { DASHBOARD_HTML, dashboardHeaders } from './dashboard.js';
import { downloadRoute, exportIdOf, sendExport } from './export-download.js';
import { toHttpError } from './http-error.js';
import type { MetricsEdge } from './metrics.js';
import type { OverviewStreams } from './overview-stream.js';
import { declaredLength } from './request.js';
import { remoteBinding, remoteSandbox } from './remote-view.js';
import type { RouteInput } from './route-spec.js';
import type { RouteId, ROUTES } from './routes.js';
import { scopeOf, type ScopeFields } from './schemas.js';
import { snapshotHandlers } from './snapshot-routes.js';
import { SseStream } from './sse.js';
import type { TenantLimiter } from './tenant-limits.js';

/** One handler per route, given its checked input. */
export type Handlers = { [K in RouteId]: (c: ApiContext, input: RouteInput<(typeof ROUTES)[K]>) => Promise<Response> };

export interface HandlerDeps {
  broker: Broker;
  limiter: TenantLimiter;
  /** `/mcp`: the MCP streamable-HTTP handler, on the raw request and response. */
  mcp: (c: ApiContext) => Promise<void>;
  /** The OpenAPI document, built once. */
  openApi: () => Record<string, unknown>;
  answer: Answers;
  metrics: MetricsEdge;
  /** `GET /v1/overview/stream`: the open dashboard streams. */
  overview: OverviewStreams;
  /** Whether a request's `Authorization` still grants `caller` what it did (a long stream asks again before each update). */
  stillGrants: (authorization: string | undefined, caller: Caller) => boolean;
}

/** What a command result looks like over HTTP: the library's, without the host path of spilled output. */
function execResult(r: BrokerExecResult): Omit<BrokerExecResult, 'fullOutputPath'> {
  const { fullOutputPath: _hostPath, ...rest } = r;
  return rest;
}

/** Accept: text/event-stream asks for the streaming form of POST /v1/exec. */
function wantsStream(c: ApiContext): boolean {
  return /(^|,)\s*text\/event-stream\s*(;|,|$)/i.test(c.env.incoming.headers.accept ?? '');
}

/**
 * Aborts when the client's connection closes: a command it is waiting for is cancelled (its tree
 * killed as on a timeout, exit code 130 in the audit), so it neither runs on unseen nor holds the
 * session's next call. One signal per connection, not per request: an HTTP/1.1 client can only
 * give up on a request by closing its connection, a closed connection answers nothing more, and
 * a new AbortController plus a listener per request cost ~30 µs of every exec. A
 * command that already ended has let go of the signal, so a later close touches nothing of it.
 */
function connectionSignals(): (c: ApiContext) => AbortSignal {
  const bySocket = new WeakMap<Socket, AbortSignal>();
  return (c) => {
    const socket = c.env.incoming.socket;
    let signal = bySocket.get(socket);
    if (signal === undefined) {
      const ac = new AbortController();
      if (socket.destroyed) ac.abort();
      else socket.once('close', () => ac.abort());
      signal = ac.signal;
      bySocket.set(socket, signal);
    }
    return signal;
  };
}

export function apiHandlers(deps: HandlerDeps): Handlers {
  const { broker, limiter, answer } = deps;
  const json = answer.json;
  const clientGone = connectionSignals();

  /**
   * The call scope of a request: the token's tenant plus the request's fields, checked by the
   * library's rules (400), then against the token's profiles and the host backend rule (403).
   */
  const scoped = (c: ApiContext, fields: ScopeFields): CallScope => {
    const caller = c.get('caller');
    const scope = scopeOf(caller.tenant, fields, caller.token);
    assertProfileAllowed(caller, scope.profile);
    assertNotOnHost(broker, scope);
    return scope;
  };

  /**
   * Runs the command and streams it: `stdout`/`stderr` events in arrival order, then one `result`
   * event with the full result (so a client may ignore the chunks), or one `error` event. Bad
   * input was refused before the stream started, as plain JSON. A client that disconnects
   * cancels the command.
   */
  const streamExec = async (c: ApiContext, scope: CallScope, body: { command: string; timeoutSeconds?: number | undefined; workdir?: string | undefined; stdin?: string | undefined }): Promise<Response> => {
    const res = c.env.outgoing;
    res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-store', 'x-accel-buffering': 'no' });
    res.flushHeaders();
    const events = new SseStream(res);
    try {
      const r = await broker.exec(scope, body.command, {
        timeoutSeconds: body.timeoutSeconds, workdir: body.workdir, stdin: body.stdin, signal: clientGone(c),
        onChunk: (stream, chunk) => events.chunk(stream, chunk),
      });
      events.send('result', execResult(r));
    } catch (err) {
      const e = toHttpError(err);
      events.send('error', { error: { code: e.code, message: e.message, status: e.status } });
    }
    await events.end();
    return RESPONSE_ALREADY_SENT;
  };

  const exec = async (c: ApiContext, body: RouteInput<(typeof ROUTES)['exec']>['body'], stream: boolean): Promise<Response> => {
    const scope = scoped(c, body);
    if (stream) return streamExec(c, scope, body);
    const r = await broker.exec(scope, body.command, {
      timeoutSeconds: body.timeoutSeconds, workdir: body.workdir, stdin: body.stdin, signal: clientGone(c),
    });
    return json(c, execResult(r));
  };

  return {
    page: (c) => answer.bytes(c, 200, DASHBOARD_HTML, dashboardHeaders()),
    health: async (c) => json(c, { ok: true }),
    openapi: async (c) => json(c, deps.openApi()),
    metrics: async (c) => {
      const { body, contentType } = await deps.metrics.render();
      return answer.bytes(c, 200, body, { 'content-type': contentType, 'cache-control': 'no-store' });
    },
    whoami: async (c) => json(c, c.get('caller')),
    explain: async (c, { body }) => json(c, remoteBinding(broker.explain(scoped(c, body)))),
    exec: (c, { body }) => exec(c, body, wantsStream(c)),
    execStream: (c, { body }) => exec(c, body, true),
    closeSession: async (c, { body }) => json(c, await broker.closeSession(scoped(c, body))),
    sandboxes: async (c) => {
      const { tenant, profiles } = c.get('caller');
      // Only the token's profiles; a shared:* sandbox belongs to no profile and stays visible.
      const list = await broker.listWithState(tenant);
      return json(c, list.filter((s) => s.profile === null || profiles.includes(s.profile)).map(remoteSandbox));
    },
    overviewStream: async (c) => {
      const authorization = c.env.incoming.headers.authorization;
      const caller = c.get('caller');
      await deps.overview.serve(c.env.outgoing, caller, () => deps.stillGrants(authorization, caller));
      return RESPONSE_ALREADY_SENT;
    },
    audit: async (c, { query }) => {
      const { tenant, profiles } = c.get('caller');
      // The filters follow the scope rules too: a session or user no call could carry is bad input.
      const { session, user } = normalizeScope({ tenant, session: query.session, user: query.user });
      return json(c, broker.audit({ tenant, profiles, session, user, limit: query.limit ?? 100 }));
    },
    egressAudit: async (c, { query }) => {
      const { tenant, profiles } = c.get('caller');
      const { session, user } = normalizeScope({ tenant, session: query.session, user: query.user });
      const allowed = query.decision === undefined ? undefined : query.decision === 'allowed';
      return json(c, broker.egressAudit({ tenant, profiles, session, user, allowed, limit: query.limit ?? 100 }));
    },
    startJob: async (c, { body }) => json(c, await broker.jobs.start(scoped(c, body), body.command, { workdir: body.workdir }), 201),
    listJobs: async (c, { query }) => json(c, await broker.jobs.list(scoped(c, query))),
    readJob: async (c, { params, query: { offset, maxBytes, ...scope } }) =>
      json(c, await broker.jobs.read(scoped(c, scope), params.id, { offset, maxBytes })),
    killJob: async (c, { params, query }) => json(c, await broker.jobs.kill(scoped(c, query), params.id)),
    upload: async (c, { query: { path, ...scope } }) => {
      const s = scoped(c, scope);
      const size = declaredLength(c.env.incoming);
      // Bytes in flight are what a tenant could make the server hold; streaming keeps each
      // upload to a few chunks in memory, and this bounds how many of them one tenant runs.
      const release = limiter.reserveBytes(c.get('caller').tenant, size);
      try {
        return json(c, await broker.files.uploadStream(s, { path, size, stream: c.env.incoming }), 201);
      } finally {
        release();
      }
    },
    readFile: async (c, { query: { path, maxBytes, ...scope } }) => {
      const r = await broker.files.readFile(scoped(c, scope), { path, maxBytes });
      return answer.bytes(c, 200, r.data, {
        'content-type': 'application/octet-stream', 'x-berth-path': encodeURIComponent(r.path), 'cache-control': 'no-store',
      });
    },
    exportFile: async (c, { body: { path, maxBytes, ...fields } }) => {
      const scope = scoped(c, fields);
      const r = await broker.files.exportPath(scope, { path, maxBytes });
      // A remote caller gets a route to download the export, never its host path.
      const exportId = exportIdOf(r.hostPath);
      return json(c, { exportId, download: downloadRoute(exportId, scope), bytes: r.bytes, kind: r.kind });
    },
    download: async (c, { params, query }) => {
      await sendExport(c.env.outgoing, broker.berthHome, scoped(c, query), params.id);
      return RESPONSE_ALREADY_SENT;
    },
    mcp: async (c) => {
      await deps.mcp(c);
      return RESPONSE_ALREADY_SENT;
    },
    ...snapshotHandlers(broker, answer, scoped),
  };
}
