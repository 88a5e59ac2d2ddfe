import { execFile } from 'node:child_process';
import { mkdtempSync, realpathSync, rmSync } from 'node:fs';
import { request } from 'node:http';
import { connect, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import { Broker } from '../../src/broker/broker.js';
import { parseConfig } from '../../src/setup/parse-config.js';
import { BerthServer } from '../../src/server/server.js';
import { TokenStore } from '../../src/server/tokens.js';
import { openStream, send } from '../helpers/mcp-raw.js';
import { parsePrometheusText, sampleValue } from '../helpers/prom-text.js';
import { SseReader } from '../helpers/sse-reader.js';

/*
 * The bounds on berth serve's connections (server.maxConnections, maxConnectionsPerAddress,
 * headerTimeoutSeconds, keepAliveSeconds, bodyStallSeconds), over real sockets to a real server on
 * a local broker (real bash): a flood of idle and half-sent connections from several loopback
 * addresses (Linux routes all of 127.0.0.0/8 to lo) is bounded and closed in time while another
 * tenant's exec answers; and what is slow but alive (a long exec, streams, an upload that keeps
 * sending or that waits for its session) is never cut.
 */

interface Setup {
  server: BerthServer;
  port: number;
  tokens: TokenStore;
  logs: string[];
  home: string;
}

async function start(server: Record<string, number>, more: { overview?: { intervalMs: number }; exec?: { maxOutputChars: number } } = {}): Promise<Setup> {
  const { overview, exec } = more;
  const home = realpathSync(mkdtempSync(join(tmpdir(), 'berth-conns-')));
  // The local backend serves remote callers only because the config says so.
  const config = parseConfig({ backend: 'local', persistent: false, server: { allowHostBackend: true, ...server }, ...(exec === undefined ? {} : { exec }) });
  const broker = await Broker.open({ config, berthHome: home, env: { PATH: process.env['PATH'] } });
  const tokens = TokenStore.sharing(broker);
  const logs: string[] = [];
  const http = await BerthServer.start({ broker, tokens, port: 0, log: (_ns, m) => logs.push(m), ...(overview === undefined ? {} : { overview }) });
  onTestFinished(async () => {
    await http.close({ graceMs: 1_000 });
    tokens.close();
    await broker.close();
    rmSync(home, { recursive: true, force: true });
  });
  return { server: http, port: http.port, tokens, logs, home };
}

/** A raw connection from `from`: what it received, and when the server closed it (ms after it was open). */
class Raw {
  received = '';
  closedAfterMs: number | undefined;
  private openedMs = 0;
  readonly closed: Promise<void>;
  readonly ready: Promise<void>;

  constructor(readonly socket: Socket) {
    this.socket.on('data', (d: Buffer) => (this.received += d.toString('latin1')));
    this.socket.on('error', () => undefined);
    this.ready = new Promise((resolve) => this.socket.once('connect', () => {
      this.openedMs = Date.now();
      resolve();
    }));
    this.closed = new Promise((resolve) => this.socket.once('close', () => {
      this.closedAfterMs = Date.now() - this.openedMs;
      resolve();
    }));
  }

  static open(port: number, from: string, send = ''): Raw {
    const raw = new Raw(connect({ port, host: '127.0.0.1', localAddress: from }));
    if (send !== '') raw.socket.write(send);
    return raw;
  }
}

const MCP_INIT = { jsonrpc: '2.0', id: 0, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'raw', version: '1' } } };
const HALF_HEAD = 'GET /v1/health HTTP/1.1\r\nhost: localhost\r\n';
const halfBody = (token: string): string =>
  `POST /v1/exec HTTP/1.1\r\nhost: localhost\r\nauthorization: Bearer ${token}\r\ncontent-type: application/json\r\ncontent-length: 200\r\n\r\n{"comm`;

/** Waits until every connection closed, at most `timeoutMs`; then says how many did not. */
async function allClosed(raws: Raw[], timeoutMs: number): Promise<number> {
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([Promise.all(raws.map((r) => r.closed)), new Promise((r) => (timer = setTimeout(r, timeoutMs)))]);
  clearTimeout(timer);
  return raws.filter((r) => r.closedAfterMs === undefined).length;
}

/**
 * One POST /v1/exec from `from` on a connection of its own: status and body. `bodyAfterMs`: the
 * head goes first, the body that much later (as a client that streams its body does).
 */
function execFrom(port: number, from: string, token: string, body: unknown, bodyAfterMs?: number): Promise<{ status: number; body: string }> {
  const data = JSON.stringify(body);
  return new Promise((resolve, reject) => {
    const req = request({
      port, host: '127.0.0.1', localAddress: from, method: 'POST', path: '/v1/exec', agent: false,
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', 'content-length': Buffer.byteLength(data) },
    }, (res) => {
      let text = '';
      res.setEncoding('utf8').on('data', (c: string) => (text += c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text }));
    });
    req.on('error', reject);
    if (bodyAfterMs === undefined) {
      req.end(data);
      return;
    }
    req.flushHeaders();
    setTimeout(() => req.end(data), bodyAfterMs);
  });
}

/** The pid of the `tar -x` an upload into a sandbox under `home` runs (the local backend's), once it runs. */
async function tarOf(home: string): Promise<number> {
  const deadline = Date.now() + 10_000;
  while (Date.now() < deadline) {
    // Asked without blocking: the server runs in this process, and its timers must keep time.
    const found = await new Promise<string>((resolve) => {
      execFile('pgrep', ['-f', `^tar -x -o -f - -C ${home}/`], { encoding: 'utf8' }, (_err, stdout) => resolve(stdout.trim()));
    });
    if (found !== '') return Number(found.split('\n')[0]);
    await new Promise((r) => setTimeout(r, 20));
  }
  throw new Error(`no tar -x under ${home} within 10 s`);
}

async function scrape(s: Setup): Promise<(name: string, labels?: Record<string, string>) => number | undefined> {
  const res = await fetch(`${s.server.url}/metrics`, { headers: { authorization: `Bearer ${s.tokens.createMetrics().token}` } });
  const families = parsePrometheusText(await res.text());
  return (name, labels = {}) => sampleValue(families, name, labels);
}

describe('berth serve: connection bounds', () => {
  it('a flood of idle and half-sent connections from several addresses: the per-address bound refuses the excess, another tenant still runs commands, each is closed within its bound, counted and logged once', async () => {
    const s = await start({ maxConnections: 1000, maxConnectionsPerAddress: 60, headerTimeoutSeconds: 2, keepAliveSeconds: 1, bodyStallSeconds: 1 });
    const evil = s.tokens.create('evil').token;
    const acme = s.tokens.create('acme').token;

    // 127.0.0.1: 100 connections that send nothing or half a head; the last 40 are past its bound.
    const first = Array.from({ length: 100 }, (_, i) => Raw.open(s.port, '127.0.0.1', i % 2 === 0 ? '' : HALF_HEAD));
    await Promise.all(first.map((r) => r.ready));
    // 127.0.0.2-5: 60 each, at the bound: silent, half a head, half a body (the token's
    // bodies are read, and stall; 10 of them, within the tenant's call limit).
    const others: Raw[] = [];
    const bodies: Raw[] = [];
    for (const from of ['127.0.0.2', '127.0.0.3', '127.0.0.4', '127.0.0.5']) {
      for (let i = 0; i < 60; i++) {
        if (from === '127.0.0.2' && i < 10) bodies.push(Raw.open(s.port, from, halfBody(evil)));
        else others.push(Raw.open(s.port, from, i % 2 === 0 ? '' : HALF_HEAD));
      }
    }
    await Promise.all([...others, ...bodies].map((r) => r.ready));

    // Another tenant, from an address of its own, while all of them are open.
    const ran = await execFrom(s.port, '127.0.0.9', acme, { session: 'busy-day', command: 'echo still-served' });
    expect(ran.status, ran.body).toBe(200);
    expect(JSON.parse(ran.body)).toMatchObject({ exitCode: 0, output: 'still-served\n' });
    const stillOpen = [...first, ...others].filter((r) => r.closedAfterMs === undefined).length;
    expect(stillOpen).toBeGreaterThanOrEqual(60 + others.length);

    // Each is closed within its bound (the head: 2 s, checked every 0.5 s; the body: 1 s), with time to spare on a loaded box.
    expect(await allClosed([...first, ...others, ...bodies], 10_000)).toBe(0);
    const refused = first.filter((r) => r.closedAfterMs! < 1_000);
    expect(refused).toHaveLength(40);
    for (const r of refused) expect(r.received).toBe('');
    const timedOut = [...first.filter((r) => !refused.includes(r)), ...others];
    for (const r of timedOut) {
      expect(r.closedAfterMs).toBeGreaterThanOrEqual(1_900);
      expect(r.closedAfterMs).toBeLessThan(6_000);
      expect(r.received).toMatch(/^HTTP\/1\.1 408 Request Timeout\r\n/);
      expect(r.received).toContain('"code":"request_timeout"');
    }
    for (const r of bodies) {
      expect(r.closedAfterMs).toBeGreaterThanOrEqual(900);
      expect(r.closedAfterMs).toBeLessThan(5_000);
    }

    const metric = await scrape(s);
    expect(metric('berth_server_connections_refused_total', { reason: 'per_address' })).toBe(40);
    expect(metric('berth_server_connections_refused_total', { reason: 'total' })).toBe(0);
    expect(metric('berth_server_connections_closed_total', { reason: 'header_timeout' })).toBe(timedOut.length);
    expect(metric('berth_server_connections_closed_total', { reason: 'body_stall' })).toBe(bodies.length);
    // The scrape's own connection.
    expect(metric('berth_server_connections_open')).toBe(1);
    // One line per kind of event, not one per connection.
    expect(s.logs.filter((l) => /server\.maxConnectionsPerAddress/.test(l))).toHaveLength(1);
    expect(s.logs.filter((l) => /server\.headerTimeoutSeconds/.test(l))).toHaveLength(1);
    expect(s.logs.filter((l) => /server\.bodyStallSeconds/.test(l))).toHaveLength(1);
  }, 60_000);

  it('past server.maxConnections a connection is closed as it arrives, from any address, while a call already running answers; once the others went, one is served again', async () => {
    const s = await start({ maxConnections: 20, maxConnectionsPerAddress: 20, headerTimeoutSeconds: 2 });
    const acme = s.tokens.create('acme').token;
    const running = execFrom(s.port, '127.0.0.8', acme, { session: 'long', command: 'sleep 2; echo ok' });
    await new Promise((r) => setTimeout(r, 300));
    const held = Array.from({ length: 19 }, (_, i) => Raw.open(s.port, `127.0.0.${1 + (i % 4)}`));
    await Promise.all(held.map((r) => r.ready));
    const extra = Array.from({ length: 5 }, () => Raw.open(s.port, '127.0.0.7'));
    expect(await allClosed(extra, 1_500)).toBe(0);
    for (const r of extra) expect(r.received).toBe('');
    expect(held.filter((r) => r.closedAfterMs !== undefined)).toHaveLength(0);
    const long = await running;
    expect([long.status, JSON.parse(long.body).output]).toEqual([200, 'ok\n']);

    expect(await allClosed(held, 10_000)).toBe(0);
    const ran = await execFrom(s.port, '127.0.0.7', acme, { command: 'echo back' });
    expect(ran.status, ran.body).toBe(200);
    const metric = await scrape(s);
    expect(metric('berth_server_connections_refused_total', { reason: 'total' })).toBe(5);
    expect(s.logs.filter((l) => /server\.maxConnections allows/.test(l))).toHaveLength(1);
  }, 30_000);

  it('a connection idle after its answer is closed after keepAliveSeconds (and counted); one that asks again in time is served', async () => {
    const s = await start({ keepAliveSeconds: 1, headerTimeoutSeconds: 5 });
    const health = 'GET /v1/health HTTP/1.1\r\nhost: localhost\r\n\r\n';
    const idle = Array.from({ length: 5 }, () => Raw.open(s.port, '127.0.0.3', health));
    const busy = Raw.open(s.port, '127.0.0.3', health);
    const again = setInterval(() => busy.socket.write(health), 500);
    try {
      expect(await allClosed(idle, 4_500)).toBe(0);
      for (const r of idle) {
        expect(r.received).toMatch(/^HTTP\/1\.1 200 OK\r\n/);
        // node adds a second of slack to the keep-alive time.
        expect(r.closedAfterMs).toBeGreaterThanOrEqual(1_900);
      }
      expect(busy.closedAfterMs).toBeUndefined();
      expect(busy.received.match(/HTTP\/1\.1 200 OK/g)!.length).toBeGreaterThan(3);
    } finally {
      clearInterval(again);
      busy.socket.destroy();
    }
    const metric = await scrape(s);
    expect(metric('berth_server_connections_closed_total', { reason: 'keep_alive' })).toBeGreaterThanOrEqual(5);
  }, 30_000);

  it('a malformed request is answered 400 and its connection closed, also when the client never closes its end', async () => {
    const s = await start({ headerTimeoutSeconds: 5 });
    const raws = Array.from({ length: 5 }, () => new Raw(connect({ port: s.port, host: '127.0.0.1', allowHalfOpen: true })));
    const answered = raws.map((r) => new Promise((resolve) => r.socket.once('end', resolve)));
    for (const r of raws) r.socket.write('NOT HTTP AT ALL\r\n\r\n');
    await Promise.all(answered);
    for (const r of raws) expect(r.received).toMatch(/^HTTP\/1\.1 400 Bad Request\r\n[^]*"code":"bad_request"/);
    // The clients keep their end open and send nothing more: the server holds none of them.
    let open: number | undefined;
    for (const deadline = Date.now() + 3_000; Date.now() < deadline; await new Promise((r) => setTimeout(r, 200))) {
      open = (await scrape(s))('berth_server_connections_open');
      if (open === 1) break;
    }
    expect(open, 'connections open besides the scrape\'s own').toBe(1);
    for (const r of raws) r.socket.destroy();
  }, 30_000);
});

describe('berth serve: what is slow but alive is not cut', () => {
  const BOUNDS = { headerTimeoutSeconds: 1, keepAliveSeconds: 1, bodyStallSeconds: 1 };

  it('a slow client that sends its head or body in pieces, each in time, is served', async () => {
    const s = await start({ ...BOUNDS, headerTimeoutSeconds: 3 });
    const acme = s.tokens.create('acme').token;
    const body = JSON.stringify({ command: 'echo pieces' });
    const head = `POST /v1/exec HTTP/1.1\r\nhost: localhost\r\nauthorization: Bearer ${acme}\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\nconnection: close\r\n\r\n`;
    const raw = Raw.open(s.port, '127.0.0.1');
    await raw.ready;
    const pieces = [head.slice(0, 20), head.slice(20), ...body.match(/.{1,6}/g)!];
    for (const piece of pieces) {
      raw.socket.write(piece);
      await new Promise((r) => setTimeout(r, 400));
    }
    await raw.closed;
    expect(raw.received).toMatch(/^HTTP\/1\.1 200 OK\r\n/);
    expect(raw.received).toContain('pieces\\n');
  }, 30_000);
  it('an MCP session\'s notification stream, silent for longer than every bound, stays open until the session ends', async () => {
    const s = await start(BOUNDS);
    const auth = { authorization: `Bearer ${s.tokens.create('acme').token}` };
    const url = `${s.server.url}/mcp`;
    const init = await send(url, MCP_INIT, auth);
    expect(init.status, init.text).toBe(200);
    const headers = { ...auth, 'mcp-session-id': init.headers['mcp-session-id'] as string };
    expect((await send(url, { jsonrpc: '2.0', method: 'notifications/initialized' }, headers)).status).toBe(202);
    const stream = await openStream(url, undefined, { ...headers, accept: 'text/event-stream' }, 'GET');
    expect(stream.res.statusCode).toBe(200);
    let ended = false;
    stream.res.on('close', () => (ended = true));
    await new Promise((r) => setTimeout(r, 4_000));
    expect(ended).toBe(false);
    expect((await send(url, undefined, headers, 'DELETE')).status).toBe(200);
    await stream.rest();
  }, 30_000);

  it('an exec that runs longer than every bound with nothing on the wire answers, its body sent with its head or after it', async () => {
    const s = await start(BOUNDS);
    const acme = s.tokens.create('acme').token;
    const [withHead, after] = await Promise.all([
      execFrom(s.port, '127.0.0.1', acme, { session: 'a', command: 'sleep 4; echo done' }),
      // A body that came after its head has the body timer running when the command starts.
      execFrom(s.port, '127.0.0.1', acme, { session: 'b', command: 'sleep 4; echo done' }, 300),
    ]);
    for (const ran of [withHead, after]) {
      expect(ran.status, ran.body).toBe(200);
      expect(JSON.parse(ran.body)).toMatchObject({ exitCode: 0, output: 'done\n' });
    }
  }, 30_000);

  it('a streamed exec and an overview stream that keep sending stay open past every bound', async () => {
    const s = await start(BOUNDS, { overview: { intervalMs: 300 } });
    const acme = s.tokens.create('acme').token;
    const ac = new AbortController();
    const overview = await fetch(`${s.server.url}/v1/overview/stream`, { headers: { authorization: `Bearer ${acme}` }, signal: ac.signal });
    expect(overview.status).toBe(200);
    const updates = new SseReader(overview);
    const streamed = await fetch(`${s.server.url}/v1/exec/stream`, {
      method: 'POST', headers: { authorization: `Bearer ${acme}`, 'content-type': 'application/json' },
      body: JSON.stringify({ command: 'for i in 1 2 3 4 5 6 7 8; do echo tick $i; sleep 0.5; done' }),
    });
    const text = await streamed.text();
    expect(text).toContain('tick 8');
    expect(text).toMatch(/event: result\ndata: \{[^\n]*"exitCode":0/);
    // Four seconds later the overview stream is still open and still updating.
    const seen = updates.events.length;
    expect(updates.events.filter((e) => e.event === 'overview').length).toBeGreaterThanOrEqual(3);
    await updates.next((e) => e.event === 'overview', 5_000, seen);
    ac.abort();
  }, 30_000);

  it('a large answer to a client that pauses its reading for longer than every bound is delivered whole', async () => {
    const s = await start(BOUNDS, { exec: { maxOutputChars: 10_000_000 } });
    const acme = s.tokens.create('acme').token;
    const data = JSON.stringify({ command: 'head -c 8000000 /dev/zero | tr "\\0" x' });
    // The bytes read before the answer closed (-1: the request failed).
    const received = await new Promise<number>((resolve) => {
      const req = request({
        port: s.port, host: '127.0.0.1', method: 'POST', path: '/v1/exec', agent: false,
        headers: { authorization: `Bearer ${acme}`, 'content-type': 'application/json', 'content-length': Buffer.byteLength(data) },
      }, (res) => {
        // Reads nothing for 3 s: the answer waits in the socket's buffers, then is read whole.
        res.pause();
        setTimeout(() => {
          let n = 0;
          res.on('data', (c: Buffer) => (n += c.length));
          res.on('close', () => resolve(n));
          res.resume();
        }, 3_000);
      });
      req.on('error', () => resolve(-1));
      // The body after its head: the body timer runs when the answer is written.
      req.flushHeaders();
      setTimeout(() => req.end(data), 300);
    });
    expect(received).toBeGreaterThan(8_000_000);
  }, 30_000);

  it('an upload that keeps sending, slower than any bound in all, is stored whole', async () => {
    const s = await start(BOUNDS);
    const acme = s.tokens.create('acme').token;
    const chunk = Buffer.alloc(8 * 1024, 'x');
    const pieces = 10;
    const status = await new Promise<number>((resolve, reject) => {
      const req = request({
        port: s.port, host: '127.0.0.1', method: 'PUT', path: '/v1/files?path=slow.bin', agent: false,
        headers: { authorization: `Bearer ${acme}`, 'content-length': chunk.length * pieces },
      }, (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode ?? 0));
      });
      req.on('error', reject);
      let sent = 0;
      const next = (): void => {
        req.write(chunk);
        if (++sent === pieces) req.end();
        else setTimeout(next, 400);
      };
      next();
    });
    expect(status).toBe(201);
    const size = await execFrom(s.port, '127.0.0.1', acme, { command: 'wc -c < slow.bin' });
    expect(JSON.parse(size.body).output.trim()).toBe(String(chunk.length * pieces));
  }, 30_000);

  it('an upload the sandbox takes slowly is not cut while berth has not read its body: it lands once the sandbox takes it again', async () => {
    // A 2 s stall bound: the client's trickle (a byte each 100 ms) must never look like a stall on a
    // busy machine; the sandbox holds the body back for 5 s, over two bounds.
    const s = await start({ ...BOUNDS, bodyStallSeconds: 2 });
    const acme = s.tokens.create('acme').token;
    const data = Buffer.alloc(8 * 1024 * 1024, 'y');
    let answered = false;
    const put = new Promise<number>((resolve, reject) => {
      const req = request({
        port: s.port, host: '127.0.0.1', method: 'PUT', path: '/v1/files?path=big.bin', agent: false,
        headers: { authorization: `Bearer ${acme}`, 'content-length': data.length },
      }, (res) => {
        res.resume();
        res.on('end', () => {
          answered = true;
          resolve(res.statusCode ?? 0);
        });
      });
      req.on('error', reject);
      // The first bytes start the sandbox's tar; the test stops it, then sends the rest at once.
      // Until then a byte goes every 100 ms: this client is slow but never stalls, so only the
      // sandbox's stop can hold the body back (a client idle for bodyStallSeconds is cut, rightly).
      let sent = 64 * 1024;
      req.write(data.subarray(0, sent));
      const trickle = setInterval(() => req.write(data.subarray(sent, ++sent)), 100);
      void tarOf(s.home).then((pid) => {
        process.kill(pid, 'SIGSTOP');
        clearInterval(trickle);
        req.end(data.subarray(sent));
        // Longer than two bodyStallSeconds with berth's reading stopped behind the sandbox.
        setTimeout(() => process.kill(pid, 'SIGCONT'), 5_000);
      }, (err: unknown) => {
        clearInterval(trickle);
        reject(err);
      });
    });
    await new Promise((r) => setTimeout(r, 2_000));
    expect(answered).toBe(false);
    expect(await put).toBe(201);
    const size = await execFrom(s.port, '127.0.0.1', acme, { command: 'wc -c < big.bin' });
    expect(JSON.parse(size.body).output.trim()).toBe(String(data.length));
  }, 30_000);
});
