import { OpenAPIHono, type RouteConfig } from '@hono/zod-openapi';
import type { z } from 'zod';
import {
  AuditEntry, Binding, EgressAuditEntry, Closed, ErrorAnswer, ExecResult, Export, Health, JobKilled, JobRead, JobStarted, JobSummary, Sandbox, Whoami, Written,
} from './response-schemas.js';
import { operationsOf, routeSpec, type RouteSpec } from './route-spec.js';
import { SNAPSHOT_ROUTES } from './snapshot-routes.js';
import {
  AuditQuery, EgressAuditQuery, EmptyQuery, ExecBody, ExportBody, ExportIdParams, FileGetQuery, FilePutQuery, JobIdParams, JobReadQuery, JobStartBody, ScopeBody,
  ScopeQuery,
} from './schemas.js';

/*
 * The HTTP API as data: every route, its input schemas and what it answers. `app.ts` serves
 * these (each with its handler from handlers.ts) and `openApiDocument()` describes them, from
 * the same objects.
 */

type Responses = RouteConfig['responses'];

const ref = (name: string) => ({ $ref: `#/components/responses/${name}` });
const json = (description: string, schema: z.ZodType): Responses[string] => ({ description, content: { 'application/json': { schema } } });
const binary = { type: 'string', format: 'binary' } as const;

/** The errors any authenticated route may answer (components.responses); the code decides the status (`statusOf`). */
const errors: Responses = {
  400: ref('BadRequest'), 401: ref('Unauthorized'), 403: ref('Error'), 404: ref('Error'), 409: ref('Error'), 413: ref('Error'), 422: ref('Error'),
  429: ref('TooMany'), 500: ref('Error'), 503: ref('Error'), 504: ref('Error'), 507: ref('Error'),
};

const sse: Responses[string] = {
  description: 'Server-sent events: `stdout` and `stderr` events (data: the chunk as a JSON string) in arrival order, then one `result` event ' +
    '(data: ExecResult) or one `error` event (data: Error). A client that reads slower than the command writes misses chunks (a `stderr` ' +
    'event says how many characters); the `result` event always carries the output.',
  content: { 'text/event-stream': { schema: { type: 'string' } } },
};

export const ROUTES = {
  page: routeSpec({
    method: 'get', path: '/', public: true, callSlot: false,
    doc: { summary: 'Dashboard (HTML; its data is fetched with the bearer token)', responses: { 200: { description: 'HTML page', content: { 'text/html': { schema: { type: 'string' } } } } } },
  }),
  health: routeSpec({
    method: 'get', path: '/v1/health', public: true, callSlot: false,
    doc: { summary: 'Liveness', responses: { 200: json('alive', Health) } },
  }),
  openapi: routeSpec({
    method: 'get', path: '/v1/openapi.json', public: true, callSlot: false,
    doc: { summary: 'This document', responses: { 200: { description: 'OpenAPI 3.1 document', content: { 'application/json': { schema: { type: 'object' } } } } } },
  }),
  metrics: routeSpec({
    method: 'get', path: '/metrics', query: EmptyQuery, metricsOnly: true, callSlot: false,
    doc: {
      summary: 'Prometheus metrics of this server and its installation (a metrics token only: berth token create --metrics; a tenant token is 403)',
      responses: { 200: { description: 'Prometheus text exposition format 0.0.4', content: { 'text/plain': { schema: { type: 'string' } } } }, ...errors },
    },
  }),
  whoami: routeSpec({
    method: 'get', path: '/v1/whoami', query: EmptyQuery, callSlot: true,
    doc: { summary: 'The tenant of the token and the profiles it may use', responses: { 200: json('tenant and profiles', Whoami), ...errors } },
  }),
  explain: routeSpec({
    method: 'post', path: '/v1/explain', body: ScopeBody, callSlot: true,
    doc: { summary: 'The binding of a call scope (pure policy: no engine contacted)', responses: { 200: json('binding', Binding), ...errors } },
  }),
  exec: routeSpec({
    method: 'post', path: '/v1/exec', body: ExecBody, callSlot: true,
    doc: {
      summary: 'Run one command in the session\'s sandbox (blocking; with `Accept: text/event-stream`, streamed as in /v1/exec/stream)',
      responses: {
        200: { description: 'the result (or the event stream)', content: { 'application/json': { schema: ExecResult }, 'text/event-stream': { schema: { type: 'string' } } } },
        ...errors,
      },
    },
  }),
  execStream: routeSpec({
    method: 'post', path: '/v1/exec/stream', body: ExecBody, callSlot: true,
    doc: { summary: 'Run one command, streaming its output over SSE', responses: { 200: sse, ...errors } },
  }),
  closeSession: routeSpec({
    method: 'post', path: '/v1/sessions/close', body: ScopeBody, callSlot: true,
    doc: {
      summary: 'Close a session: removes its ephemeral sandboxes no other open session uses, keeps persistent ones',
      responses: { 200: json('what was removed and kept', Closed), ...errors },
    },
  }),
  sandboxes: routeSpec({
    method: 'get', path: '/v1/sandboxes', query: EmptyQuery, callSlot: true,
    doc: {
      summary: 'The tenant\'s sandboxes of the token\'s profiles (and shared:* ones, which belong to no profile), with their state',
      responses: { 200: json('sandboxes', Sandbox.array()), ...errors },
    },
  }),
  // A standing stream, not a call: a tenant holds a few at most (MAX_STREAMS_PER_TENANT).
  overviewStream: routeSpec({
    method: 'get', path: '/v1/overview/stream', query: EmptyQuery, callSlot: false,
    doc: {
      summary: 'The dashboard\'s live view over SSE: the tenant\'s sandboxes of the token\'s profiles with their resource use, its jobs, latest calls and last hour',
      responses: {
        200: {
          description: 'Server-sent events: one `overview` event at once (data: the view), then one every few seconds and soon after each call of ' +
            'the tenant ends; an `error` event when one update could not be built (the next may succeed). A client that reads slower than ' +
            'updates come skips updates. The stream holds no concurrentCalls slot; a tenant may hold a few open at once (then 429).',
          content: { 'text/event-stream': { schema: { type: 'string' } } },
        },
        ...errors,
      },
    },
  }),
  audit: routeSpec({
    method: 'get', path: '/v1/audit', query: AuditQuery, callSlot: true,
    doc: { summary: 'The tenant\'s audit log for the token\'s profiles, newest first', responses: { 200: json('entries', AuditEntry.array()), ...errors } },
  }),
  egressAudit: routeSpec({
    method: 'get', path: '/v1/audit/egress', query: EgressAuditQuery, callSlot: true,
    doc: {
      summary: 'The egress decisions of the tenant\'s sandboxes of the token\'s profiles, newest first: host, port, allowed or refused, the rule, bytes, credential names (never a value)',
      responses: { 200: json('decisions', EgressAuditEntry.array()), ...errors },
    },
  }),
  startJob: routeSpec({
    method: 'post', path: '/v1/jobs', body: JobStartBody, callSlot: true,
    doc: {
      summary: 'Start a background job in the session\'s sandbox; it outlives the request',
      responses: { 201: json('started', JobStarted), ...errors },
    },
  }),
  listJobs: routeSpec({
    method: 'get', path: '/v1/jobs', query: ScopeQuery, callSlot: true,
    doc: { summary: 'The session\'s jobs, oldest first', responses: { 200: json('jobs', JobSummary.array()), ...errors } },
  }),
  readJob: routeSpec({
    method: 'get', path: '/v1/jobs/{id}', params: JobIdParams, query: JobReadQuery, callSlot: true,
    doc: {
      summary: 'A job\'s output from a byte offset, and its status (exit code once done; `unknown` with a null code when its sandbox vanished)',
      responses: { 200: json('output and status', JobRead), ...errors },
    },
  }),
  killJob: routeSpec({
    method: 'delete', path: '/v1/jobs/{id}', params: JobIdParams, query: ScopeQuery, callSlot: true,
    doc: {
      summary: 'Kill the job\'s process tree (nothing else in the sandbox)',
      responses: { 200: json('whether it was killed (false: it had ended)', JobKilled), ...errors },
    },
  }),
  upload: routeSpec({
    method: 'put', path: '/v1/files', query: FilePutQuery, callSlot: true,
    doc: {
      summary: 'Upload a file into the sandbox (raw body, streamed in as it arrives; Content-Length required)',
      request: { body: { required: true, content: { 'application/octet-stream': { schema: binary } } } },
      responses: { 201: json('written', Written), ...errors, 411: ref('Error') },
    },
  }),
  readFile: routeSpec({
    method: 'get', path: '/v1/files', query: FileGetQuery, callSlot: true,
    doc: {
      summary: 'Read a file from the sandbox (raw bytes)',
      responses: { 200: { description: 'the file', content: { 'application/octet-stream': { schema: binary } } }, ...errors },
    },
  }),
  exportFile: routeSpec({
    method: 'post', path: '/v1/files/export', body: ExportBody, callSlot: true,
    doc: {
      summary: 'Export a file or directory from the sandbox into the session\'s private staging area; download it from the route answered (removed when the session closes)',
      responses: { 200: json('exported', Export), ...errors },
    },
  }),
  download: routeSpec({
    method: 'get', path: '/v1/files/exports/{id}', params: ExportIdParams, query: ScopeQuery, callSlot: true,
    doc: {
      summary: 'Download an export of this scope (same tenant, profile, session and user as the export): a file as its bytes, a directory as a tar',
      responses: {
        200: {
          description: 'the export (header x-berth-kind: file or dir)',
          content: { 'application/octet-stream': { schema: binary }, 'application/x-tar': { schema: binary } },
        },
        ...errors,
      },
    },
  }),
  // GET is the MCP session's standing notification stream, not a call (sessions are bounded by limits.mcpSessions).
  mcp: routeSpec({
    method: 'all', path: '/mcp', methods: ['get', 'post', 'delete'], callSlot: ['post', 'delete'],
    doc: { summary: 'MCP streamable HTTP (GET: the server-to-client stream; POST: JSON-RPC requests; DELETE: end the MCP session)', responses: { 200: { description: 'MCP' }, ...errors } },
  }),
  ...SNAPSHOT_ROUTES,
} satisfies Record<string, RouteSpec>;

export type RouteId = keyof typeof ROUTES;

const DESCRIPTION = 'Per-conversation sandboxes for AI agents. Every request except the public ones carries `Authorization: Bearer <token>`; ' +
  'the token decides the tenant and the profiles a request may name (any other profile, or none when `default` is not among them, is 403 ' +
  '`profile_forbidden`); the request carries the rest of the call scope (profile, session, task, user). A profile that runs on the host ' +
  '(backend local) is 403 `host_backend_forbidden` unless the operator set `server.allowHostBackend`. Answers carry no host paths.';

/** The OpenAPI 3.1 description of the HTTP API, generated from the routes' own schemas (served at /v1/openapi.json). */
export function openApiDocument(): Record<string, unknown> {
  const doc = new OpenAPIHono();
  const registry = doc.openAPIRegistry;
  registry.register('Error', ErrorAnswer);
  registry.registerComponent('securitySchemes', 'bearer', { type: 'http', scheme: 'bearer', description: 'a token from `berth token create --tenant T`' });
  const error = { 'application/json': { schema: { $ref: '#/components/schemas/Error' } } };
  registry.registerComponent('responses', 'Error', { description: 'error', content: error });
  registry.registerComponent('responses', 'BadRequest', { description: 'malformed input', content: error });
  registry.registerComponent('responses', 'Unauthorized', { description: 'missing or invalid bearer token', content: error });
  registry.registerComponent('responses', 'TooMany', {
    description: 'the tenant is past limits.concurrentCalls (too_many_calls) or limits.uploadBytesInFlight (too_many_bytes); retry later',
    headers: { 'retry-after': { schema: { type: 'integer' } } },
    content: error,
  });
  for (const spec of Object.values(ROUTES) as RouteSpec[]) for (const op of operationsOf(spec)) registry.registerPath(op);
  return doc.getOpenAPI31Document({
    openapi: '3.1.0',
    info: { title: 'berth', version: '1', description: DESCRIPTION },
    security: [{ bearer: [] }],
  }) as unknown as Record<string, unknown>;
}
