import { createServer, request, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { readBody, type BodyRead } from '../../src/kit/body-reader.js';

/*
 * The one request-body reader (HTTP routes and MCP), on a real node:http server: what each
 * request's read resolved to is handed to the test, and the server answers 200 after it.
 */

const servers: Server[] = [];
afterEach(async () => {
  for (const s of servers.splice(0)) {
    s.closeAllConnections();
    await new Promise<void>((r) => s.close(() => r()));
  }
});

/** A server whose every request is read with `maxBytes`; `reads` yields each read's result in order. */
async function reader(maxBytes: number): Promise<{ url: string; next(): Promise<BodyRead> }> {
  const results: BodyRead[] = [];
  let wake: (() => void) | undefined;
  const server = createServer((req: IncomingMessage, res) => {
    void readBody(req, maxBytes).then((r) => {
      results.push(r);
      wake?.();
      res.writeHead(200).end();
    });
  });
  servers.push(server);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;
  return {
    url,
    next: async () => {
      while (results.length === 0) await new Promise<void>((r) => (wake = r));
      return results.shift() as BodyRead;
    },
  };
}

/** Sends `chunks` (chunked, unless `length` is declared), then ends the request. */
function post(url: string, chunks: string[], length?: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = request(url, { method: 'POST', headers: length === undefined ? {} : { 'content-length': String(length) } }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode ?? 0));
    });
    req.on('error', reject);
    for (const c of chunks) req.write(c);
    req.end();
  });
}

describe('readBody', () => {
  it('reads a body up to the cap whole, in one buffer', async () => {
    const r = await reader(10);
    expect(await post(r.url, ['hello', ' ', 'wörld'.slice(0, 3)])).toBe(200);
    const read = await r.next();
    expect(read.ok && read.bytes.toString('utf8')).toBe('hello wör');
  });

  it('refuses a declared length over the cap before a byte of the body is sent', async () => {
    const r = await reader(10);
    const req = request(r.url, { method: 'POST', headers: { 'content-length': '11' } });
    req.on('error', () => undefined);
    req.flushHeaders();
    // The body is never sent: a reader that waited for it would never resolve.
    expect(await r.next()).toEqual({ ok: false, reason: 'too_large' });
    req.destroy();
  });

  it('refuses a chunked body that grows past the cap once it ended, and the answer still goes out', async () => {
    const r = await reader(10);
    expect(await post(r.url, ['0123456789', 'x'])).toBe(200);
    expect(await r.next()).toEqual({ ok: false, reason: 'too_large' });
  });

  it('a client that goes away mid-body is unreadable, not a hang', async () => {
    const r = await reader(1000);
    const req = request(r.url, { method: 'POST', headers: { 'content-length': '100' } });
    req.on('error', () => undefined);
    req.write('{"partial":', () => setTimeout(() => req.destroy(), 50));
    expect(await r.next()).toEqual({ ok: false, reason: 'unreadable' });
  });
});
