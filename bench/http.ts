import { Agent, request } from 'node:http';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Broker } from '../src/broker/broker.js';
import { parseConfig } from '../src/config/schema.js';
import { BerthServer } from '../src/server/server.js';
import { TokenStore } from '../src/server/tokens.js';
import { defaultDocker } from '../src/backends/docker/engine.js';
import { fmt, row, verdict, timeMany } from './stats.js';

const N = Number(process.env['BENCH_N'] ?? 2000);
const IMAGE = process.env['BERTH_TEST_IMAGE'] ?? 'berth-sandbox:minimal';

export interface BenchServer {
  url: string;
  token: string;
  server: BerthServer;
  close(): Promise<void>;
}

/**
 * A `berth serve` in this process over `broker`, on a free loopback port, with a fresh token
 * (tenant `bench`). For the HTTP and MCP-over-HTTP figures.
 */
export async function startBenchServer(broker: Broker): Promise<BenchServer> {
  const tokens = TokenStore.open(broker.berthHome);
  const { token } = tokens.create('bench');
  const server = await BerthServer.start({ broker, tokens, port: 0 });
  return {
    url: server.url, token, server,
    close: async () => {
      await server.close({ graceMs: 2_000 });
      tokens.close();
    },
  };
}

/** POST JSON over one keep-alive connection (node:http, no fetch overhead): the transport's own cost. */
export function postJson(agent: Agent, url: string, token: string, path: string, body: unknown): Promise<unknown> {
  const data = JSON.stringify(body);
  return new Promise((resolve, reject) => {
    const req = request(`${url}${path}`, {
      method: 'POST', agent,
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', 'content-length': Buffer.byteLength(data) },
    }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8');
        if (res.statusCode !== 200) reject(new Error(`HTTP ${res.statusCode}: ${text}`));
        else resolve(JSON.parse(text));
      });
    });
    req.on('error', reject);
    req.end(data);
  });
}

async function compare(label: string, broker: Broker, n: number): Promise<void> {
  const bench = await startBenchServer(broker);
  const agent = new Agent({ keepAlive: true, maxSockets: 1 });
  try {
    const session = broker.session({ tenant: 'bench', session: 'lib' });
    const lib = row(`library exec (${label})`, await timeMany(n, () => session.exec('true')));
    const http = row(`HTTP /v1/exec keep-alive (${label})`,
      await timeMany(n, () => postJson(agent, bench.url, bench.token, '/v1/exec', { session: 'http', command: 'true' })));
    const viaFetch = row(`HTTP /v1/exec fetch() (${label})`, await timeMany(Math.min(n, 1000), async () => {
      const res = await fetch(`${bench.url}/v1/exec`, {
        method: 'POST', headers: { authorization: `Bearer ${bench.token}`, 'content-type': 'application/json' },
        body: JSON.stringify({ session: 'fetch', command: 'true' }),
      });
      await res.json();
    }));
    console.log(`  HTTP adds ${fmt(http.p50 - lib.p50)} at p50, ${fmt(http.p95 - lib.p95)} at p95 ${verdict('<= 250 µs at p50', http.p50 - lib.p50 <= 0.25)}; fetch() adds ${fmt(viaFetch.p50 - lib.p50)} at p50`);
  } finally {
    agent.destroy();
    await bench.close();
  }
}

/** Exec round trip over HTTP vs the library call, same broker, same run. */
export async function httpBench(): Promise<void> {
  console.log(`\n# HTTP API: trivial command round trip vs the library call (n=${N})`);
  const home = mkdtempSync(join(tmpdir(), 'berth-bench-http-'));
  try {
    // The local backend serves remote callers only when the config says so.
    const config = parseConfig({ backend: 'local', persistent: false, server: { allowHostBackend: true } });
    const broker = await Broker.open({ config, berthHome: home, env: { PATH: process.env['PATH'] } });
    try {
      await compare('local', broker, N);
    } finally {
      await broker.close();
    }
  } finally {
    rmSync(home, { recursive: true, force: true });
  }

  try {
    const docker = defaultDocker();
    await docker.ping();
    await docker.getImage(IMAGE).inspect();
  } catch (err) {
    console.log(`  docker: SKIPPED (${(err as Error).message})`);
    return;
  }
  const dhome = mkdtempSync(join(tmpdir(), 'berth-bench-http-docker-'));
  try {
    const broker = await Broker.open({
      config: parseConfig({ backend: 'docker', persistent: false, docker: { image: IMAGE } }), berthHome: dhome, env: { PATH: process.env['PATH'] },
    });
    try {
      await compare('docker', broker, Math.min(N, 1000));
    } finally {
      await broker.close();
    }
  } finally {
    rmSync(dhome, { recursive: true, force: true });
  }
}
