import { mkdtempSync, rmSync } from 'node:fs';
import { Agent, createServer, request } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { Broker } from '../src/broker/broker.js';
import { BENCH_IMAGE as IMAGE, dockerUnavailable } from './engine-check.js';
import { parseConfig } from '../src/setup/parse-config.js';
import type { BerthConfig } from '../src/setup/berth-config.js';
import { createMcpHttpHandler } from '../src/server/mcp/http.js';
import { fmt, row, timeMany, verdict } from './stats.js';


/**
 * One `tools/call terminal` of an open MCP session as a lean client sends it: a keep-alive
 * node:http POST, the SSE answer read to its end. The SDK's client (fetch, web streams, schema
 * checks) costs more than berth's side in this process, so this row is the server's own share.
 */
function leanToolCall(agent: Agent, url: string, sessionId: string, protocolVersion: string, id: number): Promise<void> {
  const body = JSON.stringify({ jsonrpc: '2.0', id, method: 'tools/call', params: { name: 'terminal', arguments: { command: 'true' } } });
  return new Promise((resolve, reject) => {
    const req = request(url, {
      method: 'POST', agent,
      headers: {
        'content-type': 'application/json', accept: 'application/json, text/event-stream', 'content-length': Buffer.byteLength(body),
        'mcp-session-id': sessionId, 'mcp-protocol-version': protocolVersion,
      },
    }, (res) => {
      let text = '';
      res.setEncoding('utf8').on('data', (c: string) => (text += c));
      res.on('end', () => (res.statusCode === 200 && text.includes(`"id":${id}`) && !text.includes('"isError":true') ? resolve() : reject(new Error(`MCP call: HTTP ${res.statusCode}: ${text.slice(0, 300)}`))));
    });
    req.on('error', reject);
    req.end(body);
  });
}

/**
 * Exec round trip through an MCP client over streamable HTTP (loopback, the SDK's client and
 * berth's server transport, one MCP session) against the library call on the same broker, same run.
 */
async function mcpVsLibrary(label: string, config: BerthConfig, n: number): Promise<void> {
  const home = mkdtempSync(join(tmpdir(), 'berth-bench-mcp-'));
  const broker = await Broker.open({ config, berthHome: home, env: { PATH: process.env['PATH'] } });
  const handler = createMcpHttpHandler(broker, { callerOf: () => ({ tenant: 'local', profiles: ['default'] }) });
  const server = createServer((req, res) => void handler(req, res));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const client = new Client({ name: 'berth-bench', version: '0' });
  // The SDK client passes one AbortSignal to every fetch; undici drops each request's listener on it
  // only at GC, so a tight loop of thousands of calls trips the max-listeners warning. Not needed here.
  const transport = new StreamableHTTPClientTransport(new URL(`http://127.0.0.1:${(server.address() as AddressInfo).port}/mcp`), {
    fetch: (url, init) => fetch(url, { ...init, signal: null }),
  });
  try {
    console.log(`\n# ${label}: trivial command round trip, library vs MCP over streamable HTTP (n=${n})`);
    const lib = row('berth library exec', await timeMany(n, () => broker.exec({ session: 'bench-lib' }, 'true')));
    await client.connect(transport);
    const mcp = row('MCP terminal over streamable HTTP', await timeMany(n, async () => {
      const r = await client.callTool({ name: 'terminal', arguments: { command: 'true' } });
      if (r.isError) throw new Error(`terminal failed: ${JSON.stringify(r.content)}`);
    }));
    const agent = new Agent({ keepAlive: true, maxSockets: 1 });
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/mcp`;
    let id = 1_000_000;
    const lean = row('MCP terminal, lean HTTP client', await timeMany(n, () => leanToolCall(agent, url, transport.sessionId!, transport.protocolVersion!, ++id)));
    agent.destroy();
    console.log(`  MCP adds ${fmt(lean.p50 - lib.p50)} at p50 with a lean client ${verdict('<= 400 µs at p50', lean.p50 - lib.p50 <= 0.4)}; ` +
      `${fmt(mcp.p50 - lib.p50)} with the SDK's client (${(mcp.p50 / lib.p50).toFixed(1)}x the library call)`);
  } finally {
    await transport.terminateSession().catch(() => undefined);
    await client.close().catch(() => undefined);
    await handler.close();
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
    await broker.closeSession({ session: 'bench-lib' }).catch(() => undefined);
    await broker.close();
    rmSync(home, { recursive: true, force: true });
  }
}

export async function mcpBench(n: number): Promise<void> {
  // The local backend serves remote callers only when the config says so.
  await mcpVsLibrary('mcp, local backend', parseConfig({ backend: 'local', persistent: false, server: { allowHostBackend: true } }), n);
  const why = await dockerUnavailable();
  if (why !== undefined) {
    console.log(`\n# mcp, docker backend: SKIPPED (${why})`);
    return;
  }
  await mcpVsLibrary('mcp, docker backend', parseConfig({ backend: 'docker', persistent: false, docker: { image: IMAGE } }), Math.min(n, 1000));
}
