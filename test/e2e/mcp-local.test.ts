import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, realpathSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { Broker } from '../../src/broker/broker.js';
import { parseConfig } from '../../src/setup/parse-config.js';
import { BERTH_BIN, tempInstall } from '../helpers/cli.js';
import { call, httpConn, startHttpMcp, stdioConn, type HttpMcp } from '../helpers/mcp-clients.js';
import { createToken, ServeProcess, stopAll } from '../helpers/serve.js';

/*
 * The MCP edges that need no container: HTTP auth and tenant scoping of MCP sessions, the
 * profile/user headers, stdout hygiene and shutdown of `berth mcp`, and what the tools say about
 * the local backend (not isolated). Runs on the local backend, so it runs everywhere.
 */

const LOCAL = 'backend: local\npersistent: false\n';
const INIT = {
  jsonrpc: '2.0', id: 1, method: 'initialize',
  params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'raw', version: '1' } },
};

const open: { close(): Promise<void> }[] = [];
afterEach(async () => {
  for (const o of open.splice(0).reverse()) await o.close().catch(() => undefined);
  await stopAll();
});

async function localHttp(opts: { idleSeconds?: number } = {}): Promise<{ broker: Broker; mcp: HttpMcp; home: string }> {
  const home = realpathSync(mkdtempSync(join(tmpdir(), 'berth-mcp-local-')));
  // MCP over HTTP is remote: the local backend serves it only because the config says so.
  const config = parseConfig({ backend: 'local', persistent: false, server: { allowHostBackend: true } });
  const broker = await Broker.open({ config, berthHome: home, env: { PATH: process.env['PATH'] } });
  const mcp = await startHttpMcp(broker, opts);
  open.push({ close: async () => { await broker.close(); rmSync(home, { recursive: true, force: true }); } });
  open.push(mcp);
  return { broker, mcp, home };
}

function post(url: URL, body: unknown, headers: Record<string, string> = {}): Promise<Response> {
  return fetch(url, {
    method: 'POST', body: JSON.stringify(body),
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...headers },
  });
}

describe('MCP over streamable HTTP: tenants, sessions, headers', () => {
  it('a request without a tenant gets 401 JSON and opens nothing', async () => {
    const { mcp } = await localHttp();
    const r = await post(mcp.url, INIT);
    expect(r.status).toBe(401);
    expect(await r.json()).toEqual({ error: { code: 'unauthorized', message: expect.stringMatching(/bearer token/) } });
    expect(mcp.handler.sessionCount).toBe(0);
  });

  it('an MCP session answers only to its own tenant; another tenant gets the same 404 as an unknown id', async () => {
    const { mcp } = await localHttp();
    const a = await httpConn(mcp.url, 'acme');
    open.push(a);
    const w = await call(a, 'terminal', { command: 'echo mine > note.txt && pwd' });
    expect(w.isError, w.text).toBe(false);
    const sid = a.sessionId();
    expect(sid).toBeTruthy();
    const list = { jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'terminal', arguments: { command: 'cat note.txt' } } };
    const headers = { 'mcp-session-id': sid!, 'mcp-protocol-version': '2025-06-18' };
    const cross = await post(mcp.url, list, { ...headers, 'x-test-tenant': 'evil' });
    const unknown = await post(mcp.url, list, { ...headers, 'mcp-session-id': 'no-such-session', 'x-test-tenant': 'evil' });
    expect(cross.status).toBe(404);
    expect(unknown.status).toBe(404);
    expect(await cross.json()).toEqual(await unknown.json());
    // The session is untouched and still works for its tenant.
    const again = await call(a, 'terminal', { command: 'cat note.txt' });
    expect(again.text).toContain('mine');
    expect(again.structured['sandboxKey']).toBe(`session:mcp-${sid}`);
  });

  it('a terminal result carries stdout and stderr apart in its structured content, as in its text', async () => {
    const { mcp } = await localHttp();
    const a = await httpConn(mcp.url, 'acme');
    open.push(a);
    const r = await call(a, 'terminal', { command: 'echo to-out; echo to-err >&2; exit 3' });
    expect(r.isError).toBe(true);
    expect(r.structured).toMatchObject({ exitCode: 3, stdout: 'to-out\n', stderr: 'to-err\n', timedOut: false });
    expect(r.text).toContain('[stdout]\nto-out\n');
  });

  it('after a timeout, the notice, the result\'s cwd, the recorded cwd and the next call agree on where the new shell is', async () => {
    const { broker, mcp } = await localHttp();
    const a = await httpConn(mcp.url, 'acme');
    open.push(a);
    expect((await call(a, 'terminal', { command: 'mkdir -p a b && cd a' })).isError).toBe(false);
    const r = await call(a, 'terminal', { command: 'cd ../b && export MOVED=yes && sleep 30', timeout: 1 });
    expect(r.isError).toBe(true);
    expect(r.structured).toMatchObject({ exitCode: 124, timedOut: true, cwd: expect.stringMatching(/\/b$/) });
    const cwd = r.structured['cwd'] as string;
    expect(r.text).toContain(`cwd ${cwd}\n`);
    expect(r.structured['stderr']).toContain(`a new shell took over in ${cwd} with the exported variables`);
    // The recorded cwd, where a later process (a restarted server) starts the session's shell.
    expect(broker.explain({ tenant: 'acme', session: `mcp-${a.sessionId()!}` }).cwd).toBe(cwd);
    const next = await call(a, 'terminal', { command: 'pwd; echo "[$MOVED]"' });
    expect(next.structured).toMatchObject({ exitCode: 0, stdout: `${cwd}\n[yes]\n`, cwd });
  });

  it('a request without a session id must be an initialize POST', async () => {
    const { mcp } = await localHttp();
    const get = await fetch(mcp.url, { headers: { 'x-test-tenant': 'acme', accept: 'text/event-stream' } });
    expect(get.status).toBe(400);
    const notInit = await post(mcp.url, { jsonrpc: '2.0', id: 1, method: 'tools/list' }, { 'x-test-tenant': 'acme' });
    expect(notInit.status).toBe(400);
    expect(await notInit.json()).toMatchObject({ error: { message: expect.stringMatching(/must be initialize/) } });
    const badJson = await fetch(mcp.url, { method: 'POST', body: '{nope', headers: { 'x-test-tenant': 'acme', 'content-type': 'application/json' } });
    expect(badJson.status).toBe(400);
    expect(mcp.handler.sessionCount).toBe(0);
  });

  it('x-berth-user and x-berth-profile set the session\'s scope; invalid values are 400s naming the field', async () => {
    const { mcp } = await localHttp();
    const u = await httpConn(mcp.url, 'acme', { 'x-berth-user': 'telegram:42' });
    open.push(u);
    const r = await call(u, 'terminal', { command: 'true' });
    expect(r.structured['sandboxKey']).toBe('user:telegram:42');
    expect(u.client.getInstructions()).toContain('sandbox "user:telegram:42"');

    const badProfile = await post(mcp.url, INIT, { 'x-test-tenant': 'acme', 'x-berth-profile': 'no/slashes' });
    expect(badProfile.status).toBe(400);
    expect(await badProfile.json()).toMatchObject({ error: { code: 'usage', message: expect.stringMatching(/^profile "no\/slashes"/) } });
    const badUser = await post(mcp.url, INIT, { 'x-test-tenant': 'acme', 'x-berth-user': 'nocolon' });
    expect(badUser.status).toBe(400);
    expect(await badUser.json()).toMatchObject({ error: { code: 'usage' } });
  });

  it('DELETE ends the MCP session and closes the berth session (its ephemeral dir is removed); close() ends the rest', async () => {
    const { mcp, home } = await localHttp();
    const a = await httpConn(mcp.url, 'acme');
    const b = await httpConn(mcp.url, 'acme');
    open.push(b);
    await call(a, 'terminal', { command: 'touch a.txt' });
    await call(b, 'terminal', { command: 'touch b.txt' });
    const dirs = (): string[] => readdirSync(join(home, 'sandboxes', 'local'));
    expect(dirs()).toHaveLength(2);
    expect(mcp.handler.sessionCount).toBe(2);
    await a.close();
    expect(mcp.handler.sessionCount).toBe(1);
    expect(dirs()).toHaveLength(1);
    await mcp.handler.close();
    expect(mcp.handler.sessionCount).toBe(0);
    expect(dirs()).toHaveLength(0);
  });

  it('an MCP session idle past idleSeconds is closed, unless a background job is running in it', async () => {
    // Each session's first call right after its initialize: a session left waiting while the other
    // one's sandbox was made could pass idleSeconds before its job started on a busy machine.
    const { mcp } = await localHttp({ idleSeconds: 2 });
    const idle = await httpConn(mcp.url, 'acme');
    open.push(idle);
    await call(idle, 'terminal', { command: 'true' });
    const busy = await httpConn(mcp.url, 'acme');
    open.push(busy);
    const job = await call(busy, 'terminal', { command: 'sleep 30', background: true });
    expect(job.isError, job.text).toBe(false);
    const deadline = Date.now() + 10_000;
    while (mcp.handler.sessionCount > 1 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
    expect(mcp.handler.sessionCount).toBe(1);
    await expect(call(idle, 'terminal', { command: 'true' })).rejects.toThrow(/404|not found/i);
    const still = await call(busy, 'process', { action: 'list' });
    expect(still.structured['jobs']).toEqual([expect.objectContaining({ status: 'running' })]);
    await call(busy, 'process', { action: 'kill', jobId: job.structured['jobId'] });
  });

  it('the handler itself enforces the caller\'s profiles and refuses the host backend unless the config allows it', async () => {
    const { mcp } = await localHttp();
    const forbidden = await post(mcp.url, INIT, { 'x-test-tenant': 'acme', 'x-test-profiles': 'bot', 'x-berth-profile': 'ops' });
    expect(forbidden.status).toBe(403);
    expect(await forbidden.json()).toMatchObject({ error: { code: 'profile_forbidden', message: expect.stringMatching(/profile "ops".*may use only: bot/) } });

    const home = realpathSync(mkdtempSync(join(tmpdir(), 'berth-mcp-local-')));
    const broker = await Broker.open({ config: parseConfig({ backend: 'local', persistent: false }), berthHome: home, env: { PATH: process.env['PATH'] } });
    const strict = await startHttpMcp(broker);
    open.push({ close: async () => { await broker.close(); rmSync(home, { recursive: true, force: true }); } }, strict);
    const refused = await post(strict.url, INIT, { 'x-test-tenant': 'acme' });
    expect(refused.status).toBe(403);
    expect(await refused.json()).toMatchObject({ error: { code: 'host_backend_forbidden' } });
    expect(strict.handler.sessionCount).toBe(0);
  });

  it('tool descriptions on the local backend say it is not isolated', async () => {
    const { mcp } = await localHttp();
    const c = await httpConn(mcp.url, 'acme');
    open.push(c);
    const { tools } = await c.client.listTools();
    for (const name of ['terminal', 'read_file', 'write_file']) {
      expect(tools.find((x) => x.name === name)?.description).toMatch(/NOT isolated: commands run directly on the host/);
    }
    expect(c.client.getInstructions()).toMatch(/NOT isolated/);
    expect(c.client.getInstructions()).toMatch(/backend local, isolation none\)/);
  });
});

describe('berth mcp over stdio', () => {
  it('stdout carries only JSON-RPC; stdin close ends the session (dir removed) and the process exits 0', async () => {
    using t = tempInstall(LOCAL);
    const child = spawn(process.execPath, [BERTH_BIN, 'mcp'], { cwd: t.dir, env: { ...t.env, BERTH_DEBUG: 'berth:mcp' }, stdio: ['pipe', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
    child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    const exited = new Promise<number | null>((resolve) => child.on('close', (code) => resolve(code)));
    const send = (m: unknown): void => void child.stdin.write(`${JSON.stringify(m)}\n`);
    send(INIT);
    send({ jsonrpc: '2.0', method: 'notifications/initialized' });
    send({ jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'terminal', arguments: { command: 'echo to-stdout; echo to-stderr >&2; touch made.txt' } } });
    send({ jsonrpc: '2.0', id: 3, method: 'tools/call', params: { name: 'terminal', arguments: { command: 1 } } });
    const deadline = Date.now() + 20_000;
    while (!(stdout.includes('"id":2') && stdout.includes('"id":3')) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    const dirs = readdirSync(join(t.home, 'sandboxes', 'local'));
    expect(dirs).toHaveLength(1);
    child.stdin.end();
    expect(await exited, stderr).toBe(0);

    const messages = stdout.split('\n').filter(Boolean).map((line) => JSON.parse(line) as { id?: number; result?: { isError?: boolean; content: { text: string }[] }; error?: { code: number } });
    expect(messages.map((m) => m.id).sort()).toEqual([1, 2, 3]);
    const ran = messages.find((m) => m.id === 2)!;
    expect(ran.result?.content[0]?.text).toMatch(/^exit code 0\n[^]*\[stdout\]\nto-stdout\n[^]*\[stderr\]\nto-stderr\n/);
    expect(messages.find((m) => m.id === 3)?.error?.code).toBe(-32602);
    expect(stderr).toMatch(/"component":"berth:mcp","msg":"serving session mcp-[0-9a-f]{12} over stdio/);
    expect(stderr).toMatch(/session closed; removed \[session:mcp-[0-9a-f]{12}\]/);
    expect(existsSync(join(t.home, 'sandboxes', 'local', dirs[0]!))).toBe(false);
  });

  it('--session names the berth session; closing stdin ends it within the SDK client\'s 2 s grace', async () => {
    using t = tempInstall(LOCAL);
    const c = await stdioConn({ cwd: t.dir, env: t.env, args: ['--session', 'chat-7'] });
    const r = await call(c, 'terminal', { command: 'pwd' });
    expect(r.structured['sandboxKey']).toBe('session:chat-7');
    const dir = r.structured['cwd'] as string;
    expect(existsSync(dir)).toBe(true);
    // The SDK client ends stdin first; a server that ignored it would get SIGTERM after 2 s.
    const started = Date.now();
    await c.close();
    expect(Date.now() - started).toBeLessThan(1_900);
    expect(existsSync(dir)).toBe(false);
  });

  it('SIGTERM closes the session and exits 0', async () => {
    using t = tempInstall(LOCAL);
    const child = spawn(process.execPath, [BERTH_BIN, 'mcp', '--session', 'term-me'], { cwd: t.dir, env: t.env, stdio: ['pipe', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
    child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    const exited = new Promise<number | null>((resolve) => child.on('close', (code) => resolve(code)));
    child.stdin.write(`${JSON.stringify(INIT)}\n`);
    child.stdin.write(`${JSON.stringify({ jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'terminal', arguments: { command: 'pwd' } } })}\n`);
    const deadline = Date.now() + 20_000;
    while (!stdout.includes('"id":2') && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    const answer = JSON.parse(stdout.split('\n').find((l) => l.includes('"id":2'))!) as { result: { structuredContent: { cwd: string } } };
    const dir = answer.result.structuredContent.cwd;
    expect(existsSync(dir)).toBe(true);
    child.kill('SIGTERM');
    expect(await exited, stderr).toBe(0);
    expect(existsSync(dir)).toBe(false);
  });

  it('bad flags are usage errors (exit 2) and print nothing on stdout', async () => {
    using t = tempInstall(LOCAL);
    const child = spawn(process.execPath, [BERTH_BIN, 'mcp', '--nope'], { cwd: t.dir, env: t.env, stdio: ['pipe', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (err += d.toString()));
    const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
    expect(code).toBe(2);
    expect(out).toBe('');
    expect(err).toMatch(/^berth: Unknown option '--nope' \(see "berth mcp --help"\)\n$/);
  });
});

describe('MCP at /mcp on a real berth serve (bearer tokens)', () => {
  it('each token\'s MCP sessions run in their own tenant; a wrong token is 401; SIGTERM closes the sessions', async () => {
    // The local backend serves remote callers only because the config says so.
    using t = tempInstall(`${LOCAL}server:\n  allowHostBackend: true\n`);
    const acmeToken = await createToken(t, 'acme');
    const globexToken = await createToken(t, 'globex');
    // A grace longer than this test's timeout: a shutdown that waited on the clients' open GET
    // /mcp streams (as if they were calls in flight) would never finish in time.
    const serve = await ServeProcess.start(t, ['--grace', '300']);
    const url = new URL('/mcp', serve.url);

    const acme = await httpConn(url, { token: acmeToken });
    const globex = await httpConn(url, { token: globexToken });
    open.push(acme, globex);
    const w = await call(acme, 'terminal', { command: 'echo acme-secret > note.txt && pwd' });
    expect(w.isError, w.text).toBe(false);
    const r = await call(globex, 'terminal', { command: 'cat note.txt' });
    expect(r.isError).toBe(true);
    expect(r.text).not.toContain('acme-secret');

    const headers = { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-06-18' };
    const body = JSON.stringify({ jsonrpc: '2.0', id: 9, method: 'tools/list' });
    const cross = await fetch(url, { method: 'POST', body, headers: { ...headers, authorization: `Bearer ${globexToken}`, 'mcp-session-id': acme.sessionId()! } });
    expect(cross.status).toBe(404);
    const noAuth = await fetch(url, { method: 'POST', body: JSON.stringify(INIT), headers });
    expect(noAuth.status).toBe(401);
    const badAuth = await fetch(url, { method: 'POST', body: JSON.stringify(INIT), headers: { ...headers, authorization: 'Bearer not-a-token' } });
    expect(badAuth.status).toBe(401);

    const dir = w.structured['cwd'] as string;
    expect(existsSync(dir)).toBe(true);
    expect(await serve.stop('SIGTERM')).toEqual({ code: 0, signal: null });
    expect(existsSync(dir), `${dir} survived the server's shutdown; stderr: ${serve.stderr}`).toBe(false);
  });
});
