import { mkdirSync, mkdtempSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createToken, qs, ServeProcess, stopAll, type ServeInstall } from '../helpers/serve.js';

/*
 * Every route of a real `berth serve` (local backend, to keep it fast) against a generated set of
 * bad requests: wrong types, missing and unknown fields, bad JSON, invalid UTF-8, huge bodies,
 * path traversal, bad query strings, bad methods, bad tokens. Each must be answered 4xx with a
 * JSON error, nothing may be created, and the server must still work afterwards.
 */

interface BadRequest {
  name: string;
  method: string;
  path: string;
  headers?: Record<string, string>;
  body?: string | Buffer;
  /** Expected status when one status is right; otherwise any 4xx. */
  status?: number;
}

const JSON_ROUTES: { path: string; required: Record<string, unknown> }[] = [
  { path: '/v1/explain', required: {} },
  { path: '/v1/exec', required: { command: 'true' } },
  { path: '/v1/exec/stream', required: { command: 'true' } },
  { path: '/v1/sessions/close', required: {} },
  { path: '/v1/jobs', required: { command: 'true' } },
  { path: '/v1/files/export', required: { path: '/tmp/x' } },
];

const QUERY_ROUTES: { method: string; path: string }[] = [
  { method: 'GET', path: '/v1/whoami' },
  { method: 'GET', path: '/v1/sandboxes' },
  { method: 'GET', path: '/v1/audit' },
  { method: 'GET', path: '/v1/jobs' },
  { method: 'GET', path: '/v1/jobs/job_0123456789abcdef' },
  { method: 'DELETE', path: '/v1/jobs/job_0123456789abcdef' },
  { method: 'GET', path: '/v1/files' },
  { method: 'PUT', path: '/v1/files' },
  { method: 'GET', path: '/v1/files/exports/0123456789abcdef' },
];

const ALL_ROUTES: { methods: string[]; path: string }[] = [
  { methods: ['GET'], path: '/v1/whoami' },
  { methods: ['POST'], path: '/v1/explain' },
  { methods: ['POST'], path: '/v1/exec' },
  { methods: ['POST'], path: '/v1/exec/stream' },
  { methods: ['POST'], path: '/v1/sessions/close' },
  { methods: ['GET'], path: '/v1/sandboxes' },
  { methods: ['GET'], path: '/v1/audit' },
  { methods: ['POST', 'GET'], path: '/v1/jobs' },
  { methods: ['GET', 'DELETE'], path: '/v1/jobs/job_0123456789abcdef' },
  { methods: ['PUT', 'GET'], path: '/v1/files' },
  { methods: ['POST'], path: '/v1/files/export' },
  { methods: ['GET'], path: '/v1/files/exports/0123456789abcdef' },
];

const WRONG_TYPES: unknown[] = [1, -1, 1.5, true, false, null, [], ['x'], {}, { a: 1 }];
const BAD_SCOPES: Record<string, unknown>[] = [
  { profile: '../etc' }, { profile: 'a b' }, { profile: 'x'.repeat(65) }, { profile: 'é' },
  { session: 'a\u0001b' }, { session: 'x'.repeat(300) }, { session: 'line\nbreak' }, { session: '\u007f' },
  { task: 'a\u0000' }, { task: 'session:x' }, { parentTask: 'p' }, { task: 't', parentTask: 't' },
  { user: 'no-platform' }, { user: ':id' }, { user: 'telegram:' }, { user: 'a:b\u0002' },
  { tenant: 'other' }, { tenant: 'local' }, { workspace: { path: '/' } }, { workspace: '/etc' },
];
const TRAVERSALS = [
  '../../etc/passwd', '/workspace/../../etc/shadow', '..', '../', 'a/../../b', '/tmp/../..', './../x',
  'x/..', '/..', 'a\u0000b', '', 'x'.repeat(5000), '\u0001', '/workspace/..', '../../../../../../root/.ssh/id_rsa',
];
const BAD_JSON = ['{', '{"a":', 'nul', '[1,2', '{"command":"x",}', "{'command':'x'}", '{"command":"x"}}', 'undefined', '{"a":1e999999}x', '\u0000'];
const INVALID_UTF8: Buffer[] = [
  Buffer.from([0xff, 0xfe, 0xfd]),
  Buffer.concat([Buffer.from('{"command":"echo '), Buffer.from([0xc3, 0x28]), Buffer.from('"}')]),
  Buffer.concat([Buffer.from('{"session":"'), Buffer.from([0xed, 0xa0, 0x80]), Buffer.from('","command":"x"}')]),
  Buffer.concat([Buffer.from('{"command":"'), Buffer.from([0xf8, 0x88, 0x80, 0x80, 0x80]), Buffer.from('"}')]),
  Buffer.from([0x7b, 0x22, 0xc0, 0xaf, 0x22, 0x3a, 0x31, 0x7d]),
];
const BAD_QUERIES = [
  '?foo=1', '?tenant=other', '?session=%zz', '?session=%ff', '?session=%c3%28', '?session=a&session=b', '?profile=..%2F..',
  '?session=%01', '?user=nope', '?workspace=/', '?session=%', '?session=%e2%82', '?task=session%3Ax', '?limit=abc',
];

function generate(): BadRequest[] {
  const out: BadRequest[] = [];
  const json = (body: unknown) => JSON.stringify(body);
  for (const r of JSON_ROUTES) {
    const post = (name: string, body: string | Buffer, headers: Record<string, string> = { 'content-type': 'application/json' }, status?: number) =>
      out.push({ name: `${r.path} ${name}`, method: 'POST', path: r.path, headers, body, status });
    for (const [i, b] of BAD_JSON.entries()) post(`bad json #${i}`, b, undefined, 400);
    for (const [i, b] of INVALID_UTF8.entries()) post(`invalid utf-8 #${i}`, b, undefined, 400);
    for (const top of ['[]', '1', '"x"', 'null', 'true', '[{"command":"x"}]']) post(`top-level ${top}`, top, undefined, 400);
    for (const [i, s] of BAD_SCOPES.entries()) post(`bad scope #${i}`, json({ ...r.required, ...s }), undefined, 400);
    for (const field of ['profile', 'session', 'task', 'parentTask', 'user']) {
      for (const [i, v] of WRONG_TYPES.entries()) post(`${field} wrong type #${i}`, json({ ...r.required, [field]: v }), undefined, 400);
    }
    for (const field of Object.keys(r.required)) {
      const { [field]: _drop, ...rest } = r.required;
      post(`missing ${field}`, json(rest), undefined, 400);
      for (const [i, v] of WRONG_TYPES.entries()) post(`${field} wrong type #${i}`, json({ ...r.required, [field]: v }), undefined, 400);
      post(`${field} empty`, json({ ...r.required, [field]: '' }), undefined, 400);
    }
    for (const k of ['foo', 'Command', 'sessionId', '__proto__', 'constructor']) post(`unknown field ${k}`, `{${JSON.stringify(k)}:1,${json(r.required).slice(1)}`, undefined, 400);
    post('huge body (2 MiB)', json({ ...r.required, session: 'x'.repeat(2 * 1024 * 1024) }), undefined, 413);
    post('text/plain', json(r.required), { 'content-type': 'text/plain' }, 415);
    post('form', 'command=true', { 'content-type': 'application/x-www-form-urlencoded' }, 415);
  }
  for (const path of ['/v1/exec', '/v1/exec/stream']) {
    for (const [i, t] of [-1, 0, 86_401, 1e308, '5', null, true].entries()) {
      out.push({ name: `${path} timeoutSeconds #${i}`, method: 'POST', path, headers: { 'content-type': 'application/json' }, body: JSON.stringify({ command: 'true', timeoutSeconds: t }), status: 400 });
    }
    for (const [i, w] of ['', 5, null, 'x'.repeat(5000)].entries()) {
      out.push({ name: `${path} workdir #${i}`, method: 'POST', path, headers: { 'content-type': 'application/json' }, body: JSON.stringify({ command: 'true', workdir: w }), status: 400 });
    }
    out.push({ name: `${path} stdin number`, method: 'POST', path, headers: { 'content-type': 'application/json' }, body: JSON.stringify({ command: 'true', stdin: 5 }), status: 400 });
    out.push({ name: `${path} command too long`, method: 'POST', path, headers: { 'content-type': 'application/json' }, body: JSON.stringify({ command: 'x'.repeat(300_000) }), status: 400 });
  }
  for (const [i, p] of TRAVERSALS.entries()) {
    out.push({ name: `export traversal #${i}`, method: 'POST', path: '/v1/files/export', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ path: p }) });
    out.push({ name: `read traversal #${i}`, method: 'GET', path: `/v1/files${qs({ path: p })}` });
    out.push({ name: `upload traversal #${i}`, method: 'PUT', path: `/v1/files${qs({ path: p })}`, body: 'data' });
    out.push({ name: `read traversal (raw) #${i}`, method: 'GET', path: `/v1/files?path=${p.replace(/\//g, '%2F').split('\u0000').join('%00')}` });
  }
  for (const r of QUERY_ROUTES) {
    for (const [i, q] of BAD_QUERIES.entries()) out.push({ name: `${r.method} ${r.path} bad query #${i}`, method: r.method, path: `${r.path}${q}`, body: r.method === 'PUT' ? 'x' : undefined, status: 400 });
  }
  for (const [i, id] of ['x', 'job_123', 'job_0123456789ABCDEF', '..', '%2e%2e', 'job_0123456789abcdeg', '%ff', 'job_0123456789abcdef0', '%20'].entries()) {
    out.push({ name: `job id #${i} GET`, method: 'GET', path: `/v1/jobs/${id}` });
    out.push({ name: `job id #${i} DELETE`, method: 'DELETE', path: `/v1/jobs/${id}` });
  }
  for (const [i, id] of ['x', '..', '%2e%2e', '0123456789ABCDEF', '0123456789abcdeg', '0123456789abcdef0', '%ff', '.partial-x', '%2f', '%00'].entries()) {
    out.push({ name: `export id #${i}`, method: 'GET', path: `/v1/files/exports/${id}?session=s` });
  }
  out.push({ name: 'unknown export', method: 'GET', path: '/v1/files/exports/0123456789abcdef?session=s', status: 404 });
  out.push({ name: 'unknown job', method: 'GET', path: '/v1/jobs/job_0123456789abcdef?session=s', status: 404 });
  out.push({ name: 'unknown job kill', method: 'DELETE', path: '/v1/jobs/job_0123456789abcdef?session=s', status: 404 });
  for (const [i, q] of ['?offset=-1', '?offset=abc', '?maxBytes=1e3', '?offset=1.5', '?offset=99999999999999999999', '?maxBytes=-5'].entries()) {
    out.push({ name: `job read query #${i}`, method: 'GET', path: `/v1/jobs/job_0123456789abcdef${q}`, status: 400 });
  }
  for (const [i, q] of ['?limit=0', '?limit=-1', '?limit=1001', '?limit=1.5', '?limit=', '?user=bad'].entries()) {
    out.push({ name: `audit query #${i}`, method: 'GET', path: `/v1/audit${q}`, status: 400 });
  }
  for (const r of ALL_ROUTES) {
    for (const m of ['GET', 'POST', 'PUT', 'DELETE', 'PATCH', 'OPTIONS']) {
      if (r.methods.includes(m)) continue;
      out.push({ name: `${m} ${r.path}`, method: m, path: r.path, status: 405 });
    }
    // Unauthenticated: every route, every way a token can be wrong.
    const tokens = [undefined, 'Bearer', 'Bearer ', 'Basic dXNlcjpwYXNz', 'Bearer berth_short', `Bearer berth_${'A'.repeat(43)}`, `bearer berth_${'-'.repeat(43)}`, 'Bearer \u00e9'];
    for (const [i, auth] of tokens.entries()) {
      for (const m of r.methods) {
        out.push({ name: `${m} ${r.path} auth #${i}`, method: m, path: r.path, headers: auth === undefined ? { 'x-no-auth': '1' } : { authorization: auth, 'x-no-auth': '1' }, status: 401 });
      }
    }
  }
  for (const p of ['/v1', '/v1/', '/v2/exec', '/v1/exec/x', '/v1/nope', '/v1/jobs/a/b', '/%ff', '/v1/%2e%2e/exec', '/mcpx', '/v1/openapi.json/x']) {
    out.push({ name: `unknown path ${p}`, method: 'GET', path: p, status: 404 });
  }
  return out;
}

describe('berth serve: malformed input on every route', () => {
  let root: string;
  let t: ServeInstall;
  let server: ServeProcess;
  let token: string;

  beforeAll(async () => {
    root = realpathSync(mkdtempSync(join(tmpdir(), 'berth-fuzz-')));
    const dir = join(root, 'work');
    mkdirSync(dir);
    // The local backend serves remote callers only because the config says so.
    writeFileSync(join(dir, 'berth.yaml'), 'backend: local\npersistent: false\nserver:\n  allowHostBackend: true\n');
    t = { dir, env: { PATH: process.env['PATH'], HOME: process.env['HOME'], BERTH_HOME: join(root, 'home') } };
    token = await createToken(t, 'fuzz');
    server = await ServeProcess.start(t);
  });

  afterAll(async () => {
    await stopAll();
    rmSync(root, { recursive: true, force: true });
  });

  it('answers >= 1,000 generated bad requests with a 4xx JSON error, creates nothing, and keeps serving', async () => {
    const cases = generate();
    expect(cases.length).toBeGreaterThanOrEqual(1000);
    console.log(`${cases.length} bad requests`);
    const failures: string[] = [];
    let next = 0;
    const worker = async (): Promise<void> => {
      while (next < cases.length) {
        const c = cases[next++] as BadRequest;
        const headers: Record<string, string> = { ...(c.headers ?? {}) };
        if (!('x-no-auth' in headers)) headers['authorization'] = `Bearer ${token}`;
        delete headers['x-no-auth'];
        try {
          const res = await fetch(`${server.url}${c.path}`, { method: c.method, headers, body: c.body });
          const text = await res.text();
          let body: { error?: { code?: unknown; message?: unknown } } | undefined;
          try {
            body = JSON.parse(text) as typeof body;
          } catch {
            body = undefined;
          }
          const okStatus = c.status === undefined ? res.status >= 400 && res.status < 500 : res.status === c.status;
          const okBody = typeof body?.error?.code === 'string' && typeof body.error.message === 'string';
          if (!okStatus || !okBody) failures.push(`${c.name}: ${res.status} ${text.slice(0, 200)}`);
        } catch (err) {
          failures.push(`${c.name}: request failed: ${(err as Error).message}`);
        }
      }
    };
    await Promise.all(Array.from({ length: 16 }, worker));
    expect(failures, failures.slice(0, 20).join('\n')).toEqual([]);

    // Malformed HTTP itself: answered by the server, not by a dropped connection.
    for (const raw of ['GARBAGE\r\n\r\n', 'GET / HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n', `GET /${'a'.repeat(20_000)} HTTP/1.1\r\n\r\n`]) {
      const answer = await rawRequest(server.url, raw);
      expect(answer, raw.slice(0, 40)).toMatch(/^HTTP\/1\.1 4\d\d/);
    }

    // Nothing was created or recorded by any of it, and the server still works.
    const api = server.client(token);
    expect((await api.get('/v1/sandboxes')).body).toEqual([]);
    // Only the well-formed kill of an unknown job reached berth, and a refused kill is audited (someone probing job ids).
    const audited = (await api.get('/v1/audit')).body as { kind: string; command: string }[];
    expect(audited.map((a) => [a.kind, a.command])).toEqual([['kill', 'job job_0123456789abcdef (failed: job_not_found)']]);
    const ok = await api.post('/v1/exec', { session: 'after', command: 'echo still-alive' });
    expect(ok.status).toBe(200);
    expect(ok.body.stdout).toBe('still-alive\n');
    expect((await fetch(`${server.url}/v1/health`)).status).toBe(200);
    expect(server.child.exitCode).toBeNull();
  }, 120_000);

  it('401 touches nothing: a valid command with a bad token runs nowhere and is not audited', async () => {
    const anon = server.client(undefined);
    const wrong = server.client(`berth_${'x'.repeat(43)}`);
    for (const c of [anon, wrong]) {
      const r = await c.post('/v1/exec', { session: 'sneaky', command: 'touch /tmp/berth-should-not-exist' });
      expect(r.status).toBe(401);
      expect(r.headers.get('www-authenticate')).toMatch(/^Bearer/);
      expect(r.body.error.code).toBe('unauthorized');
      expect((await c.post('/v1/jobs', { session: 'sneaky', command: 'sleep 100' })).status).toBe(401);
      expect((await c.get('/v1/sandboxes')).status).toBe(401);
      expect((await c.request('POST', '/mcp', { jsonrpc: '2.0', id: 1, method: 'initialize', params: {} })).status).toBe(401);
    }
    const api = server.client(token);
    const keys = ((await api.get('/v1/sandboxes')).body as { sandboxKey: string }[]).map((s) => s.sandboxKey);
    expect(keys).not.toContain('session:sneaky');
    const audit = (await api.get('/v1/audit')).body as { session: string }[];
    expect(audit.map((a) => a.session)).not.toContain('sneaky');
    // Public routes stay public.
    expect((await anon.get('/v1/health')).status).toBe(200);
    expect((await anon.get('/v1/openapi.json')).body.openapi).toBe('3.1.0');
  });
});

function rawRequest(url: string, raw: string): Promise<string> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const sock = connect(Number(port), hostname, () => sock.write(raw));
    let data = '';
    sock.setEncoding('utf8').on('data', (d: string) => (data += d));
    sock.on('end', () => resolve(data));
    sock.on('error', (e) => (data ? resolve(data) : reject(e)));
    sock.setTimeout(5_000, () => {
      sock.destroy();
      resolve(data);
    });
  });
}
