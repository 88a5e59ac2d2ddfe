import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { Broker } from '../src/broker/broker.js';
import { defaultDocker } from '../src/backends/docker/engine.js';
import { parseConfig } from '../src/config/schema.js';
import type { BerthConfig } from '../src/config/types.js';
import { createMcpHttpHandler } from '../src/server/mcp/http.js';
import { fmt, row, timeMany, verdict } from './stats.js';

const IMAGE = process.env['BERTH_TEST_IMAGE'] ?? 'berth-sandbox:minimal';

/**
 * Exec round trip through an MCP client over streamable HTTP (loopback, the SDK's client and
 * server transports, one MCP session) against the library call on the same broker, same run.
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
    console.log(`  MCP adds ${fmt(mcp.p50 - lib.p50)} at p50, ${fmt(mcp.p95 - lib.p95)} at p95 (${(mcp.p50 / lib.p50).toFixed(1)}x the library call) ${verdict('<= 400 µs at p50', mcp.p50 - lib.p50 <= 0.4)}`);
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
  const docker = defaultDocker();
  try {
    await docker.ping();
    await docker.getImage(IMAGE).inspect();
  } catch (err) {
    console.log(`\n# mcp, docker backend: SKIPPED (${(err as Error).message})`);
    return;
  }
  await mcpVsLibrary('mcp, docker backend', parseConfig({ backend: 'docker', persistent: false, docker: { image: IMAGE } }), Math.min(n, 1000));
}
