import { z } from 'zod';
import {
  AuditQuery, ExecBody, ExportBody, FileGetQuery, FilePutQuery, JobReadQuery, JobStartBody, ScopeBody, ScopeQuery,
} from './schemas.js';

/*
 * The OpenAPI 3.1 description of the HTTP API, served at /v1/openapi.json. Paths are written
 * here by hand (a test checks them against the router, both ways); request shapes come from the
 * same zod schemas that validate requests, so they cannot drift.
 */

type Json = Record<string, unknown>;

function schemaOf(s: z.ZodType): Json {
  const { $schema: _drop, ...rest } = z.toJSONSchema(s, { io: 'input', unrepresentable: 'any' }) as Json;
  return rest;
}

/** Query parameters from a strict object schema of strings. */
function queryParams(s: z.ZodType): Json[] {
  const js = schemaOf(s) as { properties?: Record<string, Json>; required?: string[] };
  return Object.entries(js.properties ?? {}).map(([name, schema]) => ({
    name, in: 'query', required: (js.required ?? []).includes(name), schema,
    ...(typeof schema['description'] === 'string' ? { description: schema['description'] } : {}),
  }));
}

const jsonBody = (s: z.ZodType): Json => ({ required: true, content: { 'application/json': { schema: schemaOf(s) } } });
const ok = (description: string, schema: Json = { type: 'object' }): Json => ({
  description, content: { 'application/json': { schema } },
});
const ref = (name: string): Json => ({ $ref: `#/components/schemas/${name}` });

const errors: Json = {
  400: { $ref: '#/components/responses/BadRequest' },
  401: { $ref: '#/components/responses/Unauthorized' },
  403: { $ref: '#/components/responses/Error' },
  404: { $ref: '#/components/responses/Error' },
  413: { $ref: '#/components/responses/Error' },
  429: { $ref: '#/components/responses/TooMany' },
  503: { $ref: '#/components/responses/Error' },
};

const jobIdParam: Json = { name: 'id', in: 'path', required: true, schema: { type: 'string', pattern: '^job_[0-9a-f]{16}$' } };
const exportIdParam: Json = { name: 'id', in: 'path', required: true, schema: { type: 'string', pattern: '^[0-9a-f]{16}$' }, description: 'the exportId from POST /v1/files/export' };

const execResult: Json = {
  type: 'object',
  required: ['exitCode', 'stdout', 'stderr', 'output', 'cwd', 'durationMs', 'timedOut', 'truncated', 'sandboxKey'],
  properties: {
    exitCode: { type: 'integer' }, stdout: { type: 'string' }, stderr: { type: 'string' },
    output: { type: 'string', description: 'stdout and stderr interleaved in arrival order' },
    cwd: { type: 'string' }, durationMs: { type: 'number' }, timedOut: { type: 'boolean' }, truncated: { type: 'boolean' },
    sandboxKey: { type: 'string' }, shellReplaced: { type: 'boolean' }, sandboxRecreated: { type: 'boolean' },
  },
};

const sse: Json = {
  description: 'Server-sent events: `stdout` and `stderr` events (data: the chunk as a JSON string) in arrival order, then one `result` event (data: ExecResult) or one `error` event (data: Error).',
  content: { 'text/event-stream': { schema: { type: 'string' } } },
};

/** The document. Built on each call: it is small and served rarely. */
export function openApiDocument(): Json {
  return {
    openapi: '3.1.0',
    info: {
      title: 'berth',
      version: '1',
      description: 'Per-conversation sandboxes for AI agents. Every request except the public ones carries `Authorization: Bearer <token>`; the token decides the tenant and the profiles a request may name (any other profile, or none when `default` is not among them, is 403 `profile_forbidden`); the request carries the rest of the call scope (profile, session, task, user). A profile that runs on the host (backend local) is 403 `host_backend_forbidden` unless the operator set `server.allowHostBackend`. Answers carry no host paths.',
    },
    security: [{ bearer: [] }],
    paths: {
      '/': {
        get: { summary: 'Dashboard (HTML; its data is fetched with the bearer token)', security: [], responses: { 200: { description: 'HTML page', content: { 'text/html': { schema: { type: 'string' } } } } } },
      },
      '/v1/health': {
        get: { summary: 'Liveness', security: [], responses: { 200: ok('alive', { type: 'object', properties: { ok: { const: true } } }) } },
      },
      '/v1/openapi.json': {
        get: { summary: 'This document', security: [], responses: { 200: ok('OpenAPI 3.1 document') } },
      },
      '/v1/whoami': {
        get: {
          summary: 'The tenant of the token and the profiles it may use',
          responses: { 200: ok('tenant and profiles', { type: 'object', properties: { tenant: { type: 'string' }, profiles: { type: 'array', items: { type: 'string' } } } }), ...errors },
        },
      },
      '/v1/explain': {
        post: { summary: 'The binding of a call scope (pure policy: no engine contacted)', requestBody: jsonBody(ScopeBody), responses: { 200: ok('binding', ref('Binding')), ...errors } },
      },
      '/v1/exec': {
        post: {
          summary: 'Run one command in the session\'s sandbox (blocking; with `Accept: text/event-stream`, streamed as in /v1/exec/stream)',
          requestBody: jsonBody(ExecBody),
          responses: { 200: { description: 'the result (or the event stream)', content: { 'application/json': { schema: ref('ExecResult') }, 'text/event-stream': { schema: { type: 'string' } } } }, ...errors },
        },
      },
      '/v1/exec/stream': {
        post: { summary: 'Run one command, streaming its output over SSE', requestBody: jsonBody(ExecBody), responses: { 200: sse, ...errors } },
      },
      '/v1/sessions/close': {
        post: {
          summary: 'Close a session: removes its ephemeral sandboxes no other open session uses, keeps persistent ones',
          requestBody: jsonBody(ScopeBody),
          responses: { 200: ok('what was removed and kept', { type: 'object', properties: { removed: { type: 'array', items: { type: 'string' } }, kept: { type: 'array', items: { type: 'string' } } } }), ...errors },
        },
      },
      '/v1/sandboxes': {
        get: { summary: 'The tenant\'s sandboxes of the token\'s profiles (and shared:* ones, which belong to no profile), with their state', responses: { 200: ok('sandboxes', { type: 'array', items: ref('Sandbox') }), ...errors } },
      },
      '/v1/audit': {
        get: { summary: 'The tenant\'s audit log for the token\'s profiles, newest first', parameters: queryParams(AuditQuery), responses: { 200: ok('entries', { type: 'array', items: ref('AuditEntry') }), ...errors } },
      },
      '/v1/jobs': {
        post: {
          summary: 'Start a background job in the session\'s sandbox; it outlives the request',
          requestBody: jsonBody(JobStartBody),
          responses: { 201: ok('started', { type: 'object', properties: { jobId: { type: 'string' }, sandboxKey: { type: 'string' } } }), 422: { $ref: '#/components/responses/Error' }, ...errors },
        },
        get: { summary: 'The session\'s jobs, oldest first', parameters: queryParams(ScopeQuery), responses: { 200: ok('jobs', { type: 'array', items: ref('JobSummary') }), ...errors } },
      },
      '/v1/jobs/{id}': {
        get: {
          summary: 'A job\'s output from a byte offset, and its status (exit code once done; `unknown` with a null code when its sandbox vanished)',
          parameters: [jobIdParam, ...queryParams(JobReadQuery)],
          responses: { 200: ok('output and status', ref('JobRead')), ...errors },
        },
        delete: {
          summary: 'Kill the job\'s process tree (nothing else in the sandbox)',
          parameters: [jobIdParam, ...queryParams(ScopeQuery)],
          responses: { 200: ok('whether it was killed (false: it had ended)', { type: 'object', properties: { killed: { type: 'boolean' } } }), ...errors },
        },
      },
      '/v1/files': {
        put: {
          summary: 'Upload a file into the sandbox (raw body, streamed in as it arrives; Content-Length required)',
          parameters: queryParams(FilePutQuery),
          requestBody: { required: true, content: { 'application/octet-stream': { schema: { type: 'string', format: 'binary' } } } },
          responses: {
            201: ok('written', { type: 'object', properties: { path: { type: 'string' }, bytes: { type: 'integer' } } }), ...errors,
            411: { $ref: '#/components/responses/Error' },
          },
        },
        get: {
          summary: 'Read a file from the sandbox (raw bytes)',
          parameters: queryParams(FileGetQuery),
          responses: { 200: { description: 'the file', content: { 'application/octet-stream': { schema: { type: 'string', format: 'binary' } } } }, ...errors },
        },
      },
      '/v1/files/export': {
        post: {
          summary: 'Export a file or directory from the sandbox into the session\'s private staging area; download it from the route answered (removed when the session closes)',
          requestBody: jsonBody(ExportBody),
          responses: { 200: ok('exported', ref('Export')), ...errors },
        },
      },
      '/v1/files/exports/{id}': {
        get: {
          summary: 'Download an export of this scope (same tenant, profile, session and user as the export): a file as its bytes, a directory as a tar',
          parameters: [exportIdParam, ...queryParams(ScopeQuery)],
          responses: {
            200: {
              description: 'the export (header x-berth-kind: file or dir)',
              content: { 'application/octet-stream': { schema: { type: 'string', format: 'binary' } }, 'application/x-tar': { schema: { type: 'string', format: 'binary' } } },
            },
            ...errors,
          },
        },
      },
      '/mcp': {
        get: { summary: 'MCP streamable HTTP (server-to-client stream)', responses: { 200: { description: 'MCP' }, ...errors } },
        post: { summary: 'MCP streamable HTTP (JSON-RPC requests)', responses: { 200: { description: 'MCP' }, ...errors } },
        delete: { summary: 'MCP streamable HTTP (end the MCP session)', responses: { 200: { description: 'MCP' }, ...errors } },
      },
    },
    components: {
      securitySchemes: { bearer: { type: 'http', scheme: 'bearer', description: 'a token from `berth token create --tenant T`' } },
      responses: {
        Error: { description: 'error', content: { 'application/json': { schema: ref('Error') } } },
        BadRequest: { description: 'malformed input', content: { 'application/json': { schema: ref('Error') } } },
        Unauthorized: { description: 'missing or invalid bearer token', content: { 'application/json': { schema: ref('Error') } } },
        TooMany: {
          description: 'the tenant is past limits.concurrentCalls (too_many_calls) or limits.uploadBytesInFlight (too_many_bytes); retry later',
          headers: { 'retry-after': { schema: { type: 'integer' } } },
          content: { 'application/json': { schema: ref('Error') } },
        },
      },
      schemas: {
        Error: {
          type: 'object', required: ['error'],
          properties: { error: { type: 'object', required: ['code', 'message'], properties: { code: { type: 'string' }, message: { type: 'string' } } } },
        },
        ExecResult: execResult,
        Binding: {
          type: 'object',
          properties: {
            backend: { type: 'string' },
            isolation: { enum: ['container', 'none'], description: 'none: commands run without isolation (see note)' },
            note: { type: 'string', description: 'set when isolation is none: where commands run and as whom' },
            tenant: { type: 'string' }, profile: { type: 'string' }, sandboxKey: { type: 'string' },
            rule: { type: 'string' }, persistent: { type: 'boolean' },
            mounted: { type: 'boolean', description: 'a host directory is mounted at /workspace (its path is for local callers only)' },
            mountReason: { type: 'string' },
            cwd: { type: 'string' }, envNames: { type: 'array', items: { type: 'string' } }, envMissing: { type: 'array', items: { type: 'string' } },
          },
        },
        Sandbox: {
          type: 'object',
          properties: {
            sandboxKey: { type: 'string' }, tenant: { type: 'string' }, profile: { type: ['string', 'null'] }, backend: { type: 'string' },
            rule: { type: 'string' }, persistent: { type: 'boolean' }, name: { type: 'string' }, mounted: { type: 'boolean' },
            createdMs: { type: 'integer' }, lastUsedMs: { type: 'integer' },
            state: { enum: ['active', 'running', 'stopped', 'missing', 'unknown'] },
            sessions: { type: 'array', items: { type: 'object', properties: { session: { type: 'string' }, open: { type: 'boolean' } } } },
          },
        },
        Export: {
          type: 'object', required: ['exportId', 'download', 'bytes', 'kind'],
          properties: {
            exportId: { type: 'string', pattern: '^[0-9a-f]{16}$' },
            download: { type: 'string', description: 'GET this route (with the same token) for the content: /v1/files/exports/{exportId} and the scope query' },
            bytes: { type: 'integer' }, kind: { enum: ['file', 'dir'] },
          },
        },
        AuditEntry: {
          type: 'object',
          properties: {
            timeMs: { type: 'integer' }, tenant: { type: 'string' }, profile: { type: 'string' }, user: { type: ['string', 'null'] },
            session: { type: ['string', 'null'] }, sandboxKey: { type: ['string', 'null'] }, kind: { type: 'string' },
            command: { type: ['string', 'null'] }, exitCode: { type: ['integer', 'null'] }, durationMs: { type: ['integer', 'null'] },
          },
        },
        JobSummary: {
          type: 'object',
          properties: {
            jobId: { type: 'string' }, command: { type: 'string' }, status: { enum: ['running', 'exited', 'killed', 'unknown'] },
            exitCode: { type: ['integer', 'null'] }, startedMs: { type: 'integer' },
          },
        },
        JobRead: {
          type: 'object', required: ['output', 'nextOffset', 'done', 'exitCode', 'status'],
          properties: {
            output: { type: 'string' }, nextOffset: { type: 'integer' },
            done: { type: 'boolean', description: 'the job ended and nothing is left past nextOffset' },
            exitCode: { type: ['integer', 'null'] }, status: { enum: ['running', 'exited', 'killed', 'unknown'] },
          },
        },
      },
    },
  };
}
