import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { Agent as HttpsAgent, createServer as createHttpsServer, request, type AgentOptions, type RequestOptions } from 'node:https';
import { connect, createServer as createNetServer, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import type { Duplex } from 'node:stream';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { connect as tlsConnect, createSecureContext, type ConnectionOptions, type SecureContext } from 'node:tls';
import { EgressCa } from '../src/egress/ca.js';
import { parseEgressPolicy } from '../src/egress/policy.js';
import { createEgressProxy } from '../src/egress/proxy.js';
import type { EgressSandbox } from '../src/egress/types.js';
import { fmt, interleaved, row, verdict } from './stats.js';

/*
 * The egress proxy's cost, against the same HTTPS server reached directly, in one run: a request
 * on a kept-alive connection (tunnelled and intercepted), a request on a new TLS connection, and
 * bulk download throughput. Three processes, as in use: the client (this one, standing for a
 * program in a sandbox), the proxy (standing for berth) and the server; this file is each child
 * too (BERTH_BENCH_EGRESS_CHILD). The server listens on 127.0.0.2:443 (names are allowed on 443
 * only; a cidr entry lifts that one loopback address), so this part needs root.
 */

const CHILD_ROLE = 'BERTH_BENCH_EGRESS_CHILD';
const CHILD_DIR = 'BERTH_BENCH_EGRESS_DIR';

const N = Number(process.env['BENCH_N'] ?? 2000);
const HOST = '127.0.0.2';
const BULK_BYTES = 64 * 1024 * 1024;
const BULK_RUNS = 5;

/** An agent whose connections go through the proxy: CONNECT, then TLS to whatever answers. */
class ProxiedAgent extends HttpsAgent {
  constructor(private readonly proxyPort: number, options: AgentOptions) {
    super(options);
  }

  override createConnection(opts: RequestOptions, callback?: (err: Error | null, s: Duplex) => void): undefined {
    const options = opts as ConnectionOptions & { port?: number };
    const done = (err: Error | null, s?: Socket): void => callback?.(err, s as Duplex);
    const raw = connect(this.proxyPort, '127.0.0.1');
    raw.setNoDelay(true);
    raw.write(`CONNECT ${options.servername}:${options.port} HTTP/1.1\r\nHost: ${options.servername}:${options.port}\r\n\r\n`);
    raw.once('data', (d: Buffer) => {
      if (!d.toString('latin1').startsWith('HTTP/1.1 200')) {
        done(new Error(`proxy: ${d.toString('latin1').split('\r\n')[0]}`));
        return;
      }
      const t = tlsConnect({ ...options, socket: raw });
      t.once('secureConnect', () => done(null, t)).once('error', (e) => done(e));
    });
    raw.once('error', (e) => done(e));
    return undefined;
  }
}

function get(agent: HttpsAgent | false, name: string, path: string, ca: string, port = 443): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = request({ host: HOST, port, servername: name, path, agent, ca, headers: { host: name } }, (res) => {
      let n = 0;
      res.on('data', (c: Buffer) => { n += c.length; });
      res.on('end', () => (res.statusCode === 200 ? resolve(n) : reject(new Error(`HTTP ${res.statusCode}`))));
    });
    req.on('error', reject);
    req.end();
  });
}

/** Median MB/s of each download, the downloads taken in turns so that load that comes and goes hits all alike. */
async function throughputs(downloads: Array<[string, () => Promise<number>]>): Promise<number[]> {
  const rates = downloads.map(() => [] as number[]);
  for (let i = 0; i < BULK_RUNS; i++) {
    for (const [k, [label, fn]] of downloads.entries()) {
      const t = process.hrtime.bigint();
      const n = await fn();
      if (n !== BULK_BYTES) throw new Error(`${label}: got ${n} bytes`);
      rates[k]!.push(n / (Number(process.hrtime.bigint() - t) / 1e9) / 1e6);
    }
  }
  return downloads.map(([label], k) => {
    const sorted = rates[k]!.sort((a, b) => a - b);
    const median = sorted[Math.floor(sorted.length / 2)]!;
    console.log(`  ${`bulk ${BULK_BYTES / 1048576} MiB, ${label}`.padEnd(44)} median ${median.toFixed(0).padStart(6)} MB/s   (runs=${BULK_RUNS})`);
    return median;
  });
}

export async function egressBench(): Promise<void> {
  console.log(`\n# egress proxy: HTTPS through the proxy vs direct (n=${N})`);
  if (process.getuid?.() !== 0) {
    console.log('  SKIPPED (the test server listens on 127.0.0.2:443, which needs root)');
    return;
  }
  const dir = mkdtempSync(join(tmpdir(), 'berth-bench-egress-'));
  const children: ChildProcess[] = [];
  try {
    // Made here first, so that the children only read them.
    const upstreamCa = await EgressCa.open(join(dir, 'upstream'));
    const berthCa = await EgressCa.open(join(dir, 'berth'));
    const server = await startChild('server', dir);
    children.push(server.child);
    if (server.error !== undefined) {
      console.log(`  SKIPPED (cannot listen on ${HOST}:443: ${server.error})`);
      return;
    }
    const proxy = await startChild('proxy', dir);
    children.push(proxy.child);
    const proxyPort = proxy.port!;

    const keep = { keepAlive: true, maxSockets: 1 };
    const direct = new HttpsAgent(keep);
    const tunnel = new ProxiedAgent(proxyPort, keep);
    const intercepted = new ProxiedAgent(proxyPort, keep);
    const up = upstreamCa.certPem;
    const [d, t, i] = await interleaved(N, [
      () => get(direct, 'api.bench.test', '/', up),
      () => get(tunnel, 'tunnel.bench.test', '/', up),
      () => get(intercepted, 'api.bench.test', '/', berthCa.certPem),
    ]);
    const dRow = row('keep-alive request, direct', d!);
    const tRow = row('keep-alive request, TLS tunnel', t!);
    const iRow = row('keep-alive request, intercepted', i!);
    console.log(`  tunnel adds ${fmt(tRow.p50 - dRow.p50)} at p50 ${verdict('<= 0.5 ms', tRow.p50 - dRow.p50 <= 0.5)}; ` +
      `interception adds ${fmt(iRow.p50 - dRow.p50)} ${verdict('<= 0.5 ms', iRow.p50 - dRow.p50 <= 0.5)}`);
    direct.destroy();
    tunnel.destroy();
    intercepted.destroy();

    const fresh = Math.min(N, 500);
    const [dn, inew] = await interleaved(fresh, [
      () => get(false, 'api.bench.test', '/', up),
      () => get(new ProxiedAgent(proxyPort, { keepAlive: false }), 'api.bench.test', '/', berthCa.certPem),
    ], 50);
    const dnRow = row('new TLS connection + request, direct', dn!);
    const inRow = row('new TLS connection + request, intercepted', inew!);
    console.log(`  intercepted / direct = ${(inRow.p50 / dnRow.p50).toFixed(2)}x at p50 ${verdict('<= 2x', inRow.p50 / dnRow.p50 <= 2)}`);

    const bulkDirect = new HttpsAgent(keep);
    const bulkTunnel = new ProxiedAgent(proxyPort, keep);
    const bulkIntercepted = new ProxiedAgent(proxyPort, keep);
    const [bd, bt, bi] = await throughputs([
      ['direct', () => get(bulkDirect, 'api.bench.test', '/bulk', up)],
      ['TLS tunnel', () => get(bulkTunnel, 'tunnel.bench.test', '/bulk', up)],
      ['intercepted', () => get(bulkIntercepted, 'api.bench.test', '/bulk', berthCa.certPem)],
    ]) as [number, number, number];
    console.log(`  tunnel / direct = ${(bt / bd).toFixed(2)}x ${verdict('>= 0.7x', bt / bd >= 0.7)}; intercepted / direct = ${(bi / bd).toFixed(2)}x ${verdict('>= 0.5x', bi / bd >= 0.5)}`);
    bulkDirect.destroy();
    bulkTunnel.destroy();
    bulkIntercepted.destroy();
  } finally {
    for (const c of children) c.kill();
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Starts this file as `role` and waits for it to say it is ready (with its port, or why not). */
function startChild(role: 'server' | 'proxy', dir: string): Promise<{ child: ChildProcess; port?: number; error?: string }> {
  const child = spawn(process.execPath, ['--import', 'tsx', fileURLToPath(import.meta.url)], {
    env: { ...process.env, [CHILD_ROLE]: role, [CHILD_DIR]: dir }, stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  return new Promise((resolve, reject) => {
    child.once('message', (m: { port?: number; error?: string }) => resolve({ child, ...m }));
    child.once('exit', (code) => reject(new Error(`the bench's ${role} exited (${code})`)));
  });
}

/** The upstream HTTPS server: small answers, and BULK_BYTES on /bulk. */
async function serveUpstream(dir: string): Promise<void> {
  const upstreamCa = await EgressCa.open(join(dir, 'upstream'));
  const contexts = new Map<string, SecureContext>();
  for (const name of ['api.bench.test', 'tunnel.bench.test']) {
    const leaf = await upstreamCa.leafFor(name);
    contexts.set(name, createSecureContext({ key: leaf.keyPem, cert: leaf.certPem }));
  }
  const bulk = Buffer.alloc(BULK_BYTES, 120);
  const server = createHttpsServer({ SNICallback: (name, cb) => cb(null, contexts.get(name)) }, (req, res) => {
    req.resume();
    const body = req.url === '/bulk' ? bulk : Buffer.from('ok');
    res.writeHead(200, { 'content-length': body.length });
    res.end(body);
  });
  server.keepAliveTimeout = 60_000;
  server.once('error', (e) => process.send?.({ error: e.message }));
  server.listen(443, HOST, () => process.send?.({ port: 443 }));
}

/** The proxy, as berth would run it, for one sandbox allowed both bench names. */
async function serveProxy(dir: string): Promise<void> {
  const upstreamCa = await EgressCa.open(join(dir, 'upstream'));
  const proxy = createEgressProxy({ ca: await EgressCa.open(join(dir, 'berth')), upstreamTrust: { system: false, extraCaPem: upstreamCa.certPem } });
  const sandbox: EgressSandbox = {
    identity: { tenant: 'bench', profile: 'default', sandboxKey: 'default' },
    policy: parseEgressPolicy({
      mode: 'allowlist', allow: ['api.bench.test', 'tunnel.bench.test', { cidr: `${HOST}/32` }],
      hosts: { 'api.bench.test': HOST, 'tunnel.bench.test': HOST },
    }),
    credentials: [{ name: 'TOKEN', value: 'real-token-value', placeholder: 'berth-ph-00000000000000000000000000000000', hosts: ['api.bench.test'] }],
    onDecision: () => undefined,
  };
  const listener = createNetServer((s) => proxy.handle(s, sandbox));
  listener.listen(0, '127.0.0.1', () => process.send?.({ port: (listener.address() as { port: number }).port }));
}

const role = process.env[CHILD_ROLE];
if (role !== undefined) {
  // A child ends with the bench that started it.
  process.on('disconnect', () => process.exit(0));
  if (role === 'server') await serveUpstream(process.env[CHILD_DIR]!);
  else await serveProxy(process.env[CHILD_DIR]!);
}
