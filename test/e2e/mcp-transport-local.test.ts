import { existsSync, mkdtempSync, realpathSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { Broker } from '../../src/broker/broker.js';
import { parseConfig } from '../../src/setup/parse-config.js';
import { startHttpMcp, type HttpMcp } from '../helpers/mcp-clients.js';
import { openStream, rpcError, send, sseEvents, toolCall } from '../helpers/mcp-raw.js';

/*
 * berth's MCP handler on its own transport (NodeTransport), seen on the wire: the terminal tool's
 * progress on the answer of its call, a client that goes away mid-command, DELETE. Local backend,
 * so it runs everywhere.
 */

const VERSION = '2025-06-18';
const INIT = { jsonrpc: '2.0', id: 0, method: 'initialize', params: { protocolVersion: VERSION, capabilities: {}, clientInfo: { name: 'raw', version: '1' } } };
const TENANT = { 'x-test-tenant': 'acme' };

const open: { close(): Promise<void> }[] = [];
afterEach(async () => {
  for (const o of open.splice(0).reverse()) await o.close().catch(() => undefined);
});

/** A handler on a local broker, and one MCP session opened on it with raw requests. */
async function session(opts: { idleSeconds?: number } = {}): Promise<{ mcp: HttpMcp; headers: Record<string, string> }> {
  const home = realpathSync(mkdtempSync(join(tmpdir(), 'berth-mcp-transport-')));
  // MCP over HTTP is remote: the local backend serves it only because the config says so.
  const config = parseConfig({ backend: 'local', persistent: false, server: { allowHostBackend: true } });
  const broker = await Broker.open({ config, berthHome: home, env: { PATH: process.env['PATH'] } });
  const mcp = await startHttpMcp(broker, opts);
  open.push({ close: async () => { await broker.close(); rmSync(home, { recursive: true, force: true }); } });
  open.push(mcp);
  const init = await send(mcp.url, INIT, TENANT);
  expect(init.status, init.text).toBe(200);
  const headers = { ...TENANT, 'mcp-session-id': init.headers['mcp-session-id'] as string, 'mcp-protocol-version': VERSION };
  expect((await send(mcp.url, { jsonrpc: '2.0', method: 'notifications/initialized' }, headers)).status).toBe(202);
  return { mcp, headers };
}

describe('MCP on berth\'s transport, on the wire', () => {
  it('terminal output streams as progress on the answer of its call, stdout and stderr in order, then the result ends it', async () => {
    const { mcp, headers } = await session();
    const s = await openStream(mcp.url, toolCall(1, 'terminal', { command: 'echo one; sleep 0.3; echo two >&2' }, { progressToken: 'tok' }), headers);
    expect([s.res.statusCode, s.res.headers['content-type']]).toEqual([200, 'text/event-stream']);
    const events = sseEvents(await s.rest());
    const result = events.at(-1)!;
    expect(result).toMatchObject({ id: 1, result: { structuredContent: { exitCode: 0 } } });
    const progress = events.slice(0, -1);
    expect(progress.length).toBeGreaterThanOrEqual(2);
    for (const p of progress) expect(p).toMatchObject({ method: 'notifications/progress', params: { progressToken: 'tok' } });
    expect(progress.map((p) => (p['params'] as { message: string }).message).join('')).toBe('one\n[stderr] two\n');
  });

  it('a client that goes away mid-command: the session serves its next call, and the gone call no longer counts as activity', async () => {
    const { mcp, headers } = await session({ idleSeconds: 1 });
    const s = await openStream(mcp.url, toolCall(2, 'terminal', { command: 'echo started; sleep 1; echo finished' }, { progressToken: 'gone' }), headers);
    expect(sseEvents(await s.next())[0]).toMatchObject({ method: 'notifications/progress', params: { message: 'started\n' } });
    s.destroy();
    const next = await send(mcp.url, toolCall(3, 'terminal', { command: 'echo next' }), headers);
    expect(sseEvents(next.text)).toMatchObject([{ id: 3, result: { structuredContent: { exitCode: 0 } } }]);
    expect(next.text).toContain('[stdout]\\nnext\\n');
    // Idle expiry closes the session only once no request is in flight: a gone call that stayed
    // "in flight" would keep it open for ever.
    const deadline = Date.now() + 20_000;
    while (mcp.handler.sessionCount > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
    expect(mcp.handler.sessionCount).toBe(0);
  });

  it('DELETE answers 200 once the berth session is closed (its ephemeral dir gone); its id is then 404 like any unknown one', async () => {
    const { mcp, headers } = await session();
    const ran = sseEvents((await send(mcp.url, toolCall(5, 'terminal', { command: 'pwd' }), headers)).text);
    const dir = (ran[0] as { result: { structuredContent: { cwd: string } } }).result.structuredContent.cwd;
    expect(existsSync(dir)).toBe(true);
    const del = await send(mcp.url, undefined, headers, 'DELETE');
    expect(del.status).toBe(200);
    expect(existsSync(dir)).toBe(false);
    expect(mcp.handler.sessionCount).toBe(0);
    const after = await send(mcp.url, toolCall(4, 'terminal', { command: 'true' }), headers);
    expect([after.status, rpcError(after).code]).toEqual([404, -32001]);
  });
});
