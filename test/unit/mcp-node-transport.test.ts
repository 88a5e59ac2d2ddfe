import { createServer, request, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { LATEST_PROTOCOL_VERSION } from '@modelcontextprotocol/sdk/types.js';
import { afterEach, describe, expect, it } from 'vitest';
import * as z from 'zod';
import { NodeTransport } from '../../src/server/mcp/node-transport.js';
import { MCP_POST, openStream, rpcError, send, sseEvents, toolCall as call, type RawAnswer } from '../helpers/mcp-raw.js';

/*
 * The transport alone, with raw node:http requests: an SDK McpServer (no broker) on one
 * NodeTransport, whose tools the tests drive (a gate a test opens, progress sent on demand).
 * Each refusal is pinned by status and JSON-RPC code, as the SDK's transport answers them.
 */

const SID = 'session-under-test';
const INIT = { jsonrpc: '2.0', id: 0, method: 'initialize', params: { protocolVersion: LATEST_PROTOCOL_VERSION, capabilities: {}, clientInfo: { name: 't', version: '0' } } };

interface Rig {
  url: string;
  transport: NodeTransport;
  mcp: McpServer;
  /** Opens the `wait` tool's gate. */
  release(): void;
  /** How many handleRequest calls resolved (an answer that never ends would never count). */
  settled(): number;
  errors: string[];
  closedCount(): number;
  sessionEnds: number;
}

const servers: Server[] = [];
afterEach(async () => {
  for (const s of servers.splice(0)) {
    s.closeAllConnections();
    await new Promise<void>((r) => s.close(() => r()));
  }
});

async function rig(opts: { initialize?: boolean; keepAliveMs?: number } = {}): Promise<Rig> {
  let release!: () => void;
  let gate = new Promise<void>((r) => (release = r));
  let settled = 0;
  let closed = 0;
  const r = { errors: [] as string[], sessionEnds: 0 } as Rig;
  const transport = new NodeTransport({ sessionId: SID, onSessionClosed: () => void r.sessionEnds++, keepAliveMs: opts.keepAliveMs });
  const mcp = new McpServer({ name: 'test', version: '0' });
  mcp.registerTool('echo', { inputSchema: { text: z.string() } }, async ({ text }) => ({ content: [{ type: 'text', text }] }));
  // Sends one progress notification for the request, then waits for the test before answering.
  mcp.registerTool('wait', { inputSchema: {} }, async (_args, extra) => {
    const token = extra._meta?.progressToken;
    if (token !== undefined) await extra.sendNotification({ method: 'notifications/progress', params: { progressToken: token, progress: 1, message: 'started' } });
    await gate;
    gate = new Promise<void>((res) => (release = res));
    if (token !== undefined) await extra.sendNotification({ method: 'notifications/progress', params: { progressToken: token, progress: 2, message: 'late' } }).catch(() => undefined);
    return { content: [{ type: 'text', text: 'done' }] };
  });
  transport.onerror = (e) => r.errors.push(e.message);
  await mcp.connect(transport);
  const prior = transport.onclose;
  transport.onclose = () => {
    closed++;
    prior?.();
  };
  const server = createServer((req, res) => void transport.handleRequest(req, res).then(() => settled++));
  servers.push(server);
  await new Promise<void>((ok) => server.listen(0, '127.0.0.1', ok));
  Object.assign(r, {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/mcp`, transport, mcp,
    release: () => release(), settled: () => settled, closedCount: () => closed,
  });
  if (opts.initialize !== false) {
    const a = await send(r.url, INIT);
    expect(a.status, a.text).toBe(200);
  }
  return r;
}

/** The session's headers after initialize. */
const inSession = (extra: Record<string, string> = {}): Record<string, string> => ({ 'mcp-session-id': SID, 'mcp-protocol-version': LATEST_PROTOCOL_VERSION, ...extra });

function refusal(a: RawAnswer): { code: number; message: string } {
  expect(a.headers['content-type']).toBe('application/json');
  return rpcError(a);
}

async function until(what: () => boolean, label: string): Promise<void> {
  for (let i = 0; i < 200 && !what(); i++) await new Promise((r) => setTimeout(r, 10));
  expect(what(), label).toBe(true);
}

describe('NodeTransport: POST refusals, as the SDK transport answers them', () => {
  it('406 without both media types in Accept; 415 unless the parsed Content-Type is application/json', async () => {
    const r = await rig();
    const list = { jsonrpc: '2.0', id: 1, method: 'tools/list' };
    const noSse = await send(r.url, list, inSession({ accept: 'application/json' }));
    expect([noSse.status, refusal(noSse).code]).toEqual([406, -32000]);
    const text = await send(r.url, list, inSession({ 'content-type': 'text/plain' }));
    expect([text.status, refusal(text).code]).toEqual([415, -32000]);
    // A substring is not a media type.
    const sneaky = await send(r.url, list, inSession({ 'content-type': 'text/plain; a=application/json' }));
    expect(sneaky.status).toBe(415);
    const charset = await send(r.url, list, inSession({ 'content-type': 'Application/JSON; charset=utf-8' }));
    expect(charset.status).toBe(200);
    expect(sseEvents(charset.text)[0]).toMatchObject({ id: 1, result: { tools: expect.any(Array) as unknown } });
  });

  it('a body that is not JSON is 400/-32700; a message that is not JSON-RPC too; a batch over the SDK limit is 400/-32600; over 4 MiB is 413', async () => {
    const r = await rig();
    const bad = await send(r.url, '{nope', inSession());
    expect([bad.status, refusal(bad)]).toEqual([400, { code: -32700, message: 'Parse error: Invalid JSON' }]);
    const notRpc = await send(r.url, { hello: 'world' }, inSession());
    expect([notRpc.status, refusal(notRpc).code]).toEqual([400, -32700]);
    const big = Array.from({ length: 101 }, (_, i) => ({ jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: i } }));
    const tooMany = await send(r.url, big, inSession());
    expect([tooMany.status, refusal(tooMany).code]).toEqual([400, -32600]);
    const huge = await send(r.url, call(5, 'echo', { text: 'x'.repeat(4 * 1024 * 1024) }), inSession());
    expect([huge.status, refusal(huge).code]).toEqual([413, -32000]);
    // The session is unharmed by all of it.
    const ok = await send(r.url, call(6, 'echo', { text: 'still here' }), inSession());
    expect(sseEvents(ok.text)).toMatchObject([{ id: 6, result: { content: [{ text: 'still here' }] } }]);
  });

  it('a declared length over 4 MiB is 413 at once: the body is not waited for (the reader every route shares)', async () => {
    const r = await rig();
    const answer = await new Promise<{ status: number; text: string }>((resolve, reject) => {
      const req = request(r.url, { method: 'POST', headers: { ...MCP_POST, ...inSession(), 'content-length': String(5 * 1024 * 1024) } }, (res) => {
        let text = '';
        res.setEncoding('utf8').on('data', (c: string) => (text += c));
        res.on('end', () => {
          resolve({ status: res.statusCode ?? 0, text });
          req.destroy();
        });
      });
      req.on('error', (e) => (e.message === 'socket hang up' ? undefined : reject(e)));
      // Headers only: a transport that read the body first would never answer.
      req.flushHeaders();
    });
    expect(answer.status).toBe(413);
    expect(rpcError({ status: answer.status, headers: {}, text: answer.text }).code).toBe(-32000);
  });

  it('before initialize no request is served; initialize assigns the id; a second one and two in a batch are 400/-32600', async () => {
    const r = await rig({ initialize: false });
    const early = await send(r.url, { jsonrpc: '2.0', id: 1, method: 'tools/list' }, inSession());
    expect([early.status, refusal(early).message]).toEqual([400, 'Bad Request: Server not initialized']);
    const twice = await send(r.url, [INIT, { ...INIT, id: 1 }]);
    expect([twice.status, refusal(twice).code]).toEqual([400, -32600]);
    expect(r.transport.sessionId).toBeUndefined();
    const init = await send(r.url, INIT);
    expect(init.status).toBe(200);
    expect(init.headers['content-type']).toBe('text/event-stream');
    expect(init.headers['mcp-session-id']).toBe(SID);
    expect(sseEvents(init.text)).toMatchObject([{ id: 0, result: { protocolVersion: LATEST_PROTOCOL_VERSION } }]);
    expect(r.transport.sessionId).toBe(SID);
    const again = await send(r.url, { ...INIT, id: 2 }, inSession());
    expect([again.status, refusal(again)]).toEqual([400, { code: -32600, message: 'Invalid Request: Server already initialized' }]);
  });

  it('after initialize: no session id is 400, another is 404/-32001; an unknown protocol version is 400, a missing one is the negotiated one', async () => {
    const r = await rig();
    const list = { jsonrpc: '2.0', id: 1, method: 'tools/list' };
    const none = await send(r.url, list, { 'mcp-protocol-version': LATEST_PROTOCOL_VERSION });
    expect([none.status, refusal(none).message]).toEqual([400, 'Bad Request: Mcp-Session-Id header is required']);
    const other = await send(r.url, list, inSession({ 'mcp-session-id': 'someone-else' }));
    expect([other.status, refusal(other).code]).toEqual([404, -32001]);
    const old = await send(r.url, list, inSession({ 'mcp-protocol-version': '1999-01-01' }));
    expect(old.status).toBe(400);
    expect(refusal(old).message).toMatch(/^Bad Request: Unsupported protocol version: 1999-01-01 \(supported versions: .*2025-06-18/);
    const missing = await send(r.url, list, { 'mcp-session-id': SID });
    expect(missing.status).toBe(200);
  });

  it('only notifications: 202 with no body; a batch of requests: one SSE answer with every response, ended after the last', async () => {
    const r = await rig();
    const note = await send(r.url, { jsonrpc: '2.0', method: 'notifications/initialized' }, inSession());
    expect([note.status, note.text, note.headers['content-type']]).toEqual([202, '', undefined]);
    const batch = await send(r.url, [call(1, 'echo', { text: 'one' }), { jsonrpc: '2.0', method: 'notifications/initialized' }, call(2, 'echo', { text: 'two' })], inSession());
    expect(batch.status).toBe(200);
    expect(batch.headers['mcp-session-id']).toBe(SID);
    const got = sseEvents(batch.text).sort((a, b) => Number(a['id']) - Number(b['id']));
    expect(got).toMatchObject([{ id: 1, result: { content: [{ text: 'one' }] } }, { id: 2, result: { content: [{ text: 'two' }] } }]);
  });

  it('a method other than GET, POST, DELETE is 405 with Allow', async () => {
    const r = await rig();
    const put = await send(r.url, undefined, inSession(), 'PUT');
    expect([put.status, put.headers['allow'], refusal(put).code]).toEqual([405, 'GET, POST, DELETE', -32000]);
  });
});

describe('NodeTransport: streams', () => {
  it('progress goes on the answer of its request, before the result; the answer ends after the result', async () => {
    const r = await rig();
    const s = await openStream(r.url, call(7, 'wait', {}, { progressToken: 'p7' }), inSession());
    expect(s.res.headers['content-type']).toBe('text/event-stream');
    expect(sseEvents(await s.next())).toMatchObject([{ method: 'notifications/progress', params: { progressToken: 'p7', message: 'started' } }]);
    r.release();
    expect(sseEvents(await s.rest())).toMatchObject([{ method: 'notifications/progress', params: { message: 'late' } }, { id: 7, result: { content: [{ text: 'done' }] } }]);
  });

  it('a client that goes away mid-answer: later messages for it are dropped, its request settles, the session serves on', async () => {
    const r = await rig();
    const before = r.settled();
    const s = await openStream(r.url, call(8, 'wait', {}, { progressToken: 'p8' }), inSession());
    await s.next();
    s.destroy();
    await until(() => r.settled() === before + 1, 'the gone POST settled');
    r.release(); // the tool now sends a progress and its result for a stream that is gone
    const ok = await send(r.url, call(9, 'echo', { text: 'after' }), inSession());
    expect(sseEvents(ok.text)).toMatchObject([{ id: 9, result: { content: [{ text: 'after' }] } }]);
    // Nothing of the gone request is left behind, and nothing was reported as an error.
    expect(r.transport['answerOf'].size).toBe(0);
    expect(r.errors.filter((e) => !e.startsWith('Not Acceptable'))).toEqual([]);
  });

  it('a client that goes away mid-body: its request settles without an answer to anyone, the session serves on', async () => {
    const r = await rig();
    const before = r.settled();
    await new Promise<void>((ok) => {
      const req = request(r.url, { method: 'POST', headers: { ...MCP_POST, ...inSession(), 'content-length': '1000' } });
      req.on('error', () => ok());
      req.write('{"jsonrpc":"2.0",', () => setTimeout(() => req.destroy(), 50));
    });
    await until(() => r.settled() === before + 1, 'the cut POST settled');
    const ok = await send(r.url, call(10, 'echo', { text: 'fine' }), inSession());
    expect(sseEvents(ok.text)).toMatchObject([{ id: 10, result: { content: [{ text: 'fine' }] } }]);
  });

  it('GET: 406 without text/event-stream; one stream per session (409 for a second, free again once closed); it carries what relates to no request', async () => {
    const r = await rig();
    const noSse = await send(r.url, undefined, inSession({ accept: 'application/json' }), 'GET');
    expect([noSse.status, refusal(noSse).code]).toEqual([406, -32000]);
    // Nobody listens yet: dropped, not an error.
    await r.mcp.sendToolListChanged();
    const g = await openStream(r.url, undefined, inSession(), 'GET');
    expect([g.res.statusCode, g.res.headers['content-type'], g.res.headers['mcp-session-id']]).toEqual([200, 'text/event-stream', SID]);
    const second = await send(r.url, undefined, inSession(), 'GET');
    expect([second.status, refusal(second).code]).toEqual([409, -32000]);
    r.mcp.sendToolListChanged();
    expect(sseEvents(await g.next())).toEqual([{ jsonrpc: '2.0', method: 'notifications/tools/list_changed' }]);
    g.destroy();
    await until(() => r.transport['standalone'] === undefined, 'the closed GET stream was released');
    const third = await openStream(r.url, undefined, inSession(), 'GET');
    expect(third.res.statusCode).toBe(200);
    third.destroy();
  });

  it('DELETE ends the session: onSessionClosed before the 200, open streams ended, onclose once, then 404 for everything', async () => {
    const r = await rig();
    const g = await openStream(r.url, undefined, inSession(), 'GET');
    const ended = new Promise<void>((ok) => g.res.on('end', ok));
    const del = await send(r.url, undefined, inSession(), 'DELETE');
    expect([del.status, del.text]).toEqual([200, '']);
    expect(r.sessionEnds).toBe(1);
    await ended;
    const after = await send(r.url, call(1, 'echo', { text: 'x' }), inSession());
    expect([after.status, refusal(after).code]).toEqual([404, -32001]);
    await r.transport.close();
    expect(r.closedCount()).toBe(1);
  });

  it('a call that says nothing for a while still gets its headers and keep-alive comments, then its result', async () => {
    const r = await rig({ keepAliveMs: 50 });
    const s = await openStream(r.url, call(11, 'wait'), inSession());
    expect(s.res.headers['content-type']).toBe('text/event-stream');
    expect(await s.next()).toMatch(/^(: keepalive\n\n)+$/);
    r.release();
    expect(sseEvents(await s.rest())).toMatchObject([{ id: 11, result: { content: [{ text: 'done' }] } }]);
  });

  it('close() ends an answer in flight and the GET stream', async () => {
    const r = await rig();
    const g = await openStream(r.url, undefined, inSession(), 'GET');
    const p = await openStream(r.url, call(3, 'wait', {}, { progressToken: 'p3' }), inSession());
    await p.next();
    const ends = [g, p].map((s) => new Promise<void>((ok) => s.res.on('end', ok)));
    await r.transport.close();
    await Promise.all(ends);
    expect(r.closedCount()).toBe(1);
    r.release();
  });
});
