import { describe, expect, it, onTestFinished } from 'vitest';
import { Broker } from '../../src/broker/broker.js';
import { parseConfig } from '../../src/setup/parse-config.js';
import { BerthServer } from '../../src/server/server.js';
import { TokenStore } from '../../src/server/tokens.js';
import { MCP_POST, openStream, send } from '../helpers/mcp-raw.js';
import { ApiClient } from '../helpers/serve.js';
import { SseReader } from '../helpers/sse-reader.js';
import { tempDir } from '../helpers/temp-dir.js';

/*
 * The call-slot rule each route declares (RouteSpec.callSlot), as a tenant with one slot
 * (limits.concurrentCalls: 1) meets it on a real in-process server, local backend: a command
 * holds the slot until it ends; the standing streams (the dashboard's overview stream, an MCP
 * session's GET stream) hold none.
 */

async function serve(): Promise<{ server: BerthServer; token: string }> {
  const home = tempDir('berth-slots-');
  const config = parseConfig({ backend: 'local', persistent: false, server: { allowHostBackend: true }, limits: { concurrentCalls: 1 } });
  const broker = await Broker.open({ config, berthHome: home, env: {} });
  const tokens = TokenStore.open(home);
  const token = tokens.create('acme').token;
  const server = await BerthServer.start({ broker, tokens, port: 0, overview: { intervalMs: 3_600_000 } });
  onTestFinished(async () => {
    await server.close({ graceMs: 2_000 });
    tokens.close();
    await broker.close();
  });
  return { server, token };
}

describe('call slots, as each route declares them (local backend)', () => {
  it('a running command holds the tenant\'s one slot: a second call is 429 until the first ended', async () => {
    const { server, token } = await serve();
    const api = new ApiClient(server.url, token);
    const first = await fetch(`${server.url}/v1/exec/stream`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ session: 's1', command: 'echo started; sleep 2; echo done' }),
    });
    const events = new SseReader(first);
    await events.next((e) => e.event === 'stdout', 20_000);
    const second = await api.post('/v1/exec', { session: 's2', command: 'true' });
    expect(second.status).toBe(429);
    expect(second.body).toMatchObject({ error: { code: 'too_many_calls' } });
    await events.next((e) => e.event === 'result', 20_000);
    await events.done;
    let after = await api.post('/v1/exec', { session: 's2', command: 'echo free' });
    // The slot is let go once the first answer's connection closed, a moment after its last event.
    for (let i = 0; i < 50 && after.status === 429; i++) {
      await new Promise((r) => setTimeout(r, 50));
      after = await api.post('/v1/exec', { session: 's2', command: 'echo free' });
    }
    expect(after.status).toBe(200);
    expect(after.body).toMatchObject({ stdout: 'free\n' });
  });

  it('an open overview stream and an MCP session\'s GET stream hold none: a command still runs beside them', async () => {
    const { server, token } = await serve();
    const auth = { authorization: `Bearer ${token}` };
    const overview = await fetch(`${server.url}/v1/overview/stream`, { headers: { ...auth, accept: 'text/event-stream' } });
    expect(overview.status).toBe(200);
    const ov = new SseReader(overview);
    await ov.next((e) => e.event === 'overview', 20_000);

    const init = await send(`${server.url}/mcp`, {
      jsonrpc: '2.0', id: 0, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 't', version: '0' } },
    }, auth);
    expect(init.status).toBe(200);
    const sessionId = String(init.headers['mcp-session-id']);
    await send(`${server.url}/mcp`, { jsonrpc: '2.0', method: 'notifications/initialized' }, { ...auth, 'mcp-session-id': sessionId, 'mcp-protocol-version': '2025-06-18' });
    const standing = await openStream(`${server.url}/mcp`, undefined, {
      ...auth, ...MCP_POST, accept: 'text/event-stream', 'mcp-session-id': sessionId, 'mcp-protocol-version': '2025-06-18',
    }, 'GET');
    expect(standing.res.statusCode).toBe(200);

    const r = await new ApiClient(server.url, token).post('/v1/exec', { session: 's1', command: 'echo beside' });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body).toMatchObject({ stdout: 'beside\n' });
    standing.destroy();
  });
});
