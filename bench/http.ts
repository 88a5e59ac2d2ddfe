import { Agent, request } from 'node:http';
import { connect, type Socket } from 'node:net';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Broker } from '../src/broker/broker.js';
import { parseConfig } from '../src/setup/parse-config.js';
import { BerthServer } from '../src/server/server.js';
import { TokenStore } from '../src/server/tokens.js';
import { BENCH_IMAGE as IMAGE, dockerUnavailable } from './engine-check.js';
import { fmt, row, verdict, timeMany } from './stats.js';

const N = Number(process.env['BENCH_N'] ?? 2000);

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
  const tokens = TokenStore.sharing(broker);
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

/**
 * The leanest client: one keep-alive TCP connection, a request written as prepared bytes, the
 * response read up to its Content-Length. In this process the node:http client's own work is
 * counted with the server's; this one's is next to nothing, so its row is the server's share.
 */
class RawHttpClient {
  private buf = '';
  private waiter: (() => void) | undefined;

  private constructor(private readonly sock: Socket, private readonly request: string) {
    sock.setEncoding('latin1').on('data', (d: string) => {
      this.buf += d;
      const head = this.buf.indexOf('\r\n\r\n');
      if (head < 0) return;
      const len = Number(/content-length: *(\d+)/i.exec(this.buf.slice(0, head))?.[1] ?? NaN);
      if (this.buf.length < head + 4 + len) return;
      if (!this.buf.startsWith('HTTP/1.1 200')) throw new Error(`HTTP: ${this.buf.slice(0, 200)}`);
      this.buf = '';
      const w = this.waiter;
      this.waiter = undefined;
      w?.();
    });
  }

  static async open(url: string, token: string, path: string, body: unknown): Promise<RawHttpClient> {
    const { hostname, port } = new URL(url);
    const sock = connect({ host: hostname, port: Number(port) });
    await new Promise<void>((resolve, reject) => sock.once('connect', resolve).once('error', reject));
    sock.setNoDelay(true);
    const data = JSON.stringify(body);
    const request = `POST ${path} HTTP/1.1\r\nhost: ${hostname}:${port}\r\nauthorization: Bearer ${token}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(data)}\r\n\r\n${data}`;
    return new RawHttpClient(sock, request);
  }

  send(): Promise<void> {
    return new Promise((resolve) => {
      this.waiter = resolve;
      this.sock.write(this.request);
    });
  }

  close(): void {
    this.sock.destroy();
  }
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
    const raw = await RawHttpClient.open(bench.url, bench.token, '/v1/exec', { session: 'raw', command: 'true' });
    const lean = row(`HTTP /v1/exec, lean client (${label})`, await timeMany(n, () => raw.send()));
    raw.close();
    console.log(`  HTTP adds ${fmt(lean.p50 - lib.p50)} at p50 with a lean client ${verdict('<= 250 µs at p50', lean.p50 - lib.p50 <= 0.25)}; ` +
      `${fmt(http.p50 - lib.p50)} (p95 ${fmt(http.p95 - lib.p95)}) with node:http, ${fmt(viaFetch.p50 - lib.p50)} with fetch()`);
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

  const why = await dockerUnavailable();
  if (why !== undefined) {
    console.log(`  docker: SKIPPED (${why})`);
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
