import { mkdtempSync, rmSync } from 'node:fs';
import { Agent as HttpsAgent, createServer as createHttpsServer, request, type AgentOptions, type RequestOptions, type Server } from 'node:https';
import { connect, createServer as createNetServer, type Server as NetServer, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import type { Duplex } from 'node:stream';
import { join } from 'node:path';
import { connect as tlsConnect, createSecureContext, type ConnectionOptions, type SecureContext } from 'node:tls';
import { EgressCa } from '../src/egress/ca.js';
import { parseEgressPolicy } from '../src/egress/policy.js';
import { createEgressProxy } from '../src/egress/proxy.js';
import type { EgressSandbox } from '../src/egress/types.js';
import { fmt, interleaved, row, verdict } from './stats.js';

/*
 * The egress proxy's cost, against the same HTTPS server reached directly, in one run: a request
 * on a kept-alive connection (tunnelled and intercepted), a request on a new TLS connection, and
 * bulk download throughput. The server listens on 127.0.0.2:443 (names are allowed on 443 only;
 * a cidr entry lifts that one loopback address), so this part needs root.
 */

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

async function throughput(label: string, fn: () => Promise<number>): Promise<number> {
  const rates: number[] = [];
  for (let i = 0; i < BULK_RUNS; i++) {
    const t = process.hrtime.bigint();
    const n = await fn();
    if (n !== BULK_BYTES) throw new Error(`${label}: got ${n} bytes`);
    rates.push(n / (Number(process.hrtime.bigint() - t) / 1e9) / 1e6);
  }
  rates.sort((a, b) => a - b);
  const median = rates[Math.floor(rates.length / 2)]!;
  console.log(`  ${`bulk ${BULK_BYTES / 1048576} MiB, ${label}`.padEnd(44)} median ${median.toFixed(0).padStart(6)} MB/s   (runs=${BULK_RUNS})`);
  return median;
}

export async function egressBench(): Promise<void> {
  console.log(`\n# egress proxy: HTTPS through the proxy vs direct (n=${N})`);
  if (process.getuid?.() !== 0) {
    console.log('  SKIPPED (the test server listens on 127.0.0.2:443, which needs root)');
    return;
  }
  const dir = mkdtempSync(join(tmpdir(), 'berth-bench-egress-'));
  let server: Server | undefined;
  let listener: NetServer | undefined;
  const upstreamCa = await EgressCa.open(join(dir, 'upstream'));
  const berthCa = await EgressCa.open(join(dir, 'berth'));
  const proxy = createEgressProxy({ ca: berthCa, upstreamTrust: { system: false, extraCaPem: upstreamCa.certPem } });
  try {
    const contexts = new Map<string, SecureContext>();
    for (const name of ['api.bench.test', 'tunnel.bench.test']) {
      const leaf = await upstreamCa.leafFor(name);
      contexts.set(name, createSecureContext({ key: leaf.keyPem, cert: leaf.certPem }));
    }
    const bulk = Buffer.alloc(BULK_BYTES, 120);
    server = createHttpsServer({ SNICallback: (name, cb) => cb(null, contexts.get(name)) }, (req, res) => {
      req.resume();
      const body = req.url === '/bulk' ? bulk : Buffer.from('ok');
      res.writeHead(200, { 'content-length': body.length });
      res.end(body);
    });
    server.keepAliveTimeout = 60_000;
    await new Promise<void>((resolve, reject) => server!.once('error', reject).listen(443, HOST, () => resolve()));

    const sandbox: EgressSandbox = {
      identity: { tenant: 'bench', profile: 'default', sandboxKey: 'default' },
      policy: parseEgressPolicy({
        mode: 'allowlist', allow: ['api.bench.test', 'tunnel.bench.test', { cidr: `${HOST}/32` }],
        hosts: { 'api.bench.test': HOST, 'tunnel.bench.test': HOST },
      }),
      credentials: [{ name: 'TOKEN', value: 'real-token-value', placeholder: 'berth-ph-00000000000000000000000000000000', hosts: ['api.bench.test'] }],
      onDecision: () => undefined,
    };
    listener = createNetServer((s) => proxy.handle(s, sandbox));
    await new Promise<void>((resolve) => listener!.listen(0, '127.0.0.1', () => resolve()));
    const proxyPort = (listener.address() as { port: number }).port;

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
    const bd = await throughput('direct', () => get(bulkDirect, 'api.bench.test', '/bulk', up));
    const bt = await throughput('TLS tunnel', () => get(bulkTunnel, 'tunnel.bench.test', '/bulk', up));
    const bi = await throughput('intercepted', () => get(bulkIntercepted, 'api.bench.test', '/bulk', berthCa.certPem));
    console.log(`  tunnel / direct = ${(bt / bd).toFixed(2)}x ${verdict('>= 0.7x', bt / bd >= 0.7)}; intercepted / direct = ${(bi / bd).toFixed(2)}x ${verdict('>= 0.5x', bi / bd >= 0.5)}`);
    bulkDirect.destroy();
    bulkTunnel.destroy();
    bulkIntercepted.destroy();
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'EADDRINUSE' || (e as NodeJS.ErrnoException).code === 'EACCES') {
      console.log(`  SKIPPED (cannot listen on ${HOST}:443: ${(e as Error).message})`);
      return;
    }
    throw e;
  } finally {
    await proxy.close();
    listener?.close();
    server?.closeAllConnections();
    server?.close();
    rmSync(dir, { recursive: true, force: true });
  }
}
