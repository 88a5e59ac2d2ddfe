import { describe, expect, it, onTestFinished } from 'vitest';
import type { Broker } from '../../src/broker/broker.js';
import { createApp } from '../../src/server/app.js';
import { openApiDocument } from '../../src/server/routes.js';
import { parseQuery } from '../../src/server/request.js';
import type { OverviewStreams } from '../../src/server/overview-stream.js';
import type { MetricsEdge } from '../../src/server/metrics.js';
import type { TokenStore } from '../../src/server/tokens.js';
import { toHttpError } from '../../src/server/http-error.js';
import { BerthError, PolicyRefusedError, UsageError } from '../../src/errors.js';
import { HostBackendForbiddenError, ProfileForbiddenError } from '../../src/server/caller.js';
import { startStubServer, stubBroker } from '../helpers/stub-server.js';
import { Logger } from '../../src/logging/logger.js';

const METHODS = ['get', 'post', 'put', 'delete', 'patch'];

/** `/v1/jobs/:id` → `/v1/jobs/{id}`, OpenAPI's spelling. */
function openApiPath(path: string): string {
  return path.replace(/:([A-Za-z]+)/g, '{$1}');
}

/** Each documented operation, as `METHOD /path`, with a path a request can use. */
function operations(doc: { paths: Record<string, Record<string, unknown>> }): { op: string; method: string; path: string }[] {
  return Object.entries(doc.paths).flatMap(([path, item]) => METHODS.filter((m) => item[m] !== undefined).map((m) => ({
    op: `${m.toUpperCase()} ${path}`, method: m.toUpperCase(), path: path.replace(/\{[A-Za-z]+\}/g, 'job_0123456789abcdef'),
  })));
}

describe('OpenAPI document', () => {
  const doc = openApiDocument() as { openapi: string; paths: Record<string, Record<string, { security?: unknown[] }>> };

  it('describes every route of the app, method by method', () => {
    // Handlers are never called here: the app's routing table is read.
    const { hono: app } = createApp({
      broker: {} as Broker, tokens: {} as TokenStore, mcp: async () => undefined, callers: new WeakMap(), draining: () => false, tokensChanged: () => undefined, log: Logger.silent(), faults: new WeakMap(),
      metrics: {} as MetricsEdge, overview: {} as OverviewStreams,
    });
    const withMethods = new Set(app.routes.filter((r) => r.method !== 'ALL').map((r) => r.path));
    const missing: string[] = [];
    for (const r of app.routes) {
      if (r.path === '/*') continue; // middleware of every request
      // An ALL entry on a path with methods of its own is its 405 answer; on any other path
      // (/mcp) it serves the methods MCP's streamable HTTP uses.
      const methods = r.method !== 'ALL' ? [r.method.toLowerCase()] : withMethods.has(r.path) ? [] : ['get', 'post', 'delete'];
      const item = doc.paths[openApiPath(r.path)];
      for (const m of methods) if (item?.[m] === undefined) missing.push(`${m.toUpperCase()} ${r.path}`);
    }
    expect(app.routes.length).toBeGreaterThan(20);
    expect(missing).toEqual([]);
  });

  it('describes nothing the server does not serve', async () => {
    const { url, token } = await startStubServer(stubBroker(), onTestFinished);
    const extra: string[] = [];
    for (const o of operations(doc)) {
      const res = await fetch(`${url}${o.path}`, { method: o.method, headers: { authorization: `Bearer ${token}` } });
      // An event stream (the dashboard's overview) does not end: its status is all this needs.
      if (res.headers.get('content-type')?.startsWith('text/event-stream') === true) await res.body?.cancel();
      else await res.arrayBuffer();
      if (res.status === 404 || res.status === 405) extra.push(`${o.op}: ${res.status}`);
    }
    expect(extra).toEqual([]);
  });

  it('marks exactly the public routes as needing no token', async () => {
    const { url } = await startStubServer(stubBroker(), onTestFinished);
    const publicInDoc = Object.entries(doc.paths).flatMap(([path, item]) =>
      METHODS.filter((m) => Array.isArray(item[m]?.security) && item[m]?.security?.length === 0).map((m) => `${m.toUpperCase()} ${path}`));
    const publicInRouter: string[] = [];
    for (const o of operations(doc)) {
      const res = await fetch(`${url}${o.path}`, { method: o.method });
      await res.arrayBuffer();
      if (res.status !== 401) publicInRouter.push(o.op);
    }
    expect(publicInDoc.sort()).toEqual(publicInRouter.sort());
  });

  it('is OpenAPI 3.1 with request schemas generated from the validators (strict objects)', () => {
    expect(doc.openapi).toBe('3.1.0');
    const exec = (doc.paths['/v1/exec'] as Record<string, { requestBody: { content: Record<string, { schema: { additionalProperties: boolean; required: string[]; properties: Record<string, unknown> } }> } }>)['post']!;
    const schema = exec.requestBody.content['application/json']!.schema;
    expect(schema.additionalProperties).toBe(false);
    expect(schema.required).toEqual(['command']);
    expect(Object.keys(schema.properties)).not.toContain('tenant');
  });

  it('describes no host path in any answer (exports are a download route, mounts a boolean)', () => {
    const text = JSON.stringify(doc);
    expect(text).not.toMatch(/hostPath|"mount"|fullOutputPath/);
    expect(text).toContain('"mounted"');
    expect(doc.paths['/v1/files/exports/{id}']?.['get']).toBeDefined();
  });

  it('describes the egress audit route with its filters and entries, and the egress policy of explain\'s Binding', () => {
    const full = doc as unknown as {
      paths: Record<string, Record<string, { parameters?: { name: string }[] }>>;
      components: { schemas: Record<string, { properties: Record<string, { properties?: Record<string, unknown> }> }> };
    };
    const route = full.paths['/v1/audit/egress']?.['get'];
    expect(route?.parameters?.map((p) => p.name).sort()).toEqual(['decision', 'limit', 'session', 'user']);
    expect(Object.keys(full.components.schemas['EgressAuditEntry']!.properties)).toEqual(expect.arrayContaining([
      'tenant', 'session', 'user', 'host', 'port', 'allowed', 'rule', 'bytesUp', 'bytesDown', 'credentials', 'status',
    ]));
    expect(Object.keys(full.components.schemas['Binding']!.properties['egress']!.properties!).sort())
      .toEqual(['allow', 'credentials', 'deny', 'hosts', 'mode', 'proxy']);
  });
});

describe('strict query strings', () => {
  it('decodes UTF-8 percent-escapes and +', () => {
    expect(parseQuery('?session=caf%C3%A9&user=telegram%3A1&x=a+b&empty')).toEqual({ session: 'café', user: 'telegram:1', x: 'a b', empty: '' });
  });

  it('refuses invalid UTF-8, malformed escapes and repeated keys instead of guessing', () => {
    for (const q of ['?s=%ff', '?s=%c3%28', '?s=%', '?s=%zz', '?s=%e2%82', '?s=1&s=2']) expect(() => parseQuery(q), q).toThrow();
  });
});

describe('error translation', () => {
  it('maps berth errors by code and hides internal ones', () => {
    expect(toHttpError(new UsageError('bad')).status).toBe(400);
    expect(toHttpError(new PolicyRefusedError('no')).status).toBe(403);
    expect(toHttpError(new BerthError('job_not_found', 'x')).status).toBe(404);
    expect(toHttpError(new BerthError('backend_unavailable', 'x')).status).toBe(503);
    expect(toHttpError(new ProfileForbiddenError('x'))).toMatchObject({ status: 403, code: 'profile_forbidden' });
    expect(toHttpError(new HostBackendForbiddenError('x'))).toMatchObject({ status: 403, code: 'host_backend_forbidden' });
    const internal = toHttpError(new Error('secret internals at /home/x'));
    expect(internal.status).toBe(500);
    expect(internal.message).not.toContain('/home/x');
  });
});
