import { createServer, get, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, expect, it, onTestFinished } from 'vitest';
import { SseStream } from '../../src/server/sse.js';

/*
 * Server-sent events to a client that does not read: a real HTTP server and a real socket whose
 * reading is paused, so the kernel's buffers fill and the response's writes start to fail.
 */

const CHUNK = 'x'.repeat(16 * 1024);
const CHUNKS = 2048; // 32 MiB: more than loopback socket buffers take
const BOUND = 64 * 1024;

interface Rig {
  /** The client's response, paused: nothing is read until the test resumes it. */
  client: IncomingMessage;
  /** The server's response, once the request arrived. */
  response: Promise<ServerResponse>;
}

async function rig(): Promise<Rig> {
  let got: (res: ServerResponse) => void = () => undefined;
  const response = new Promise<ServerResponse>((resolve) => (got = resolve));
  const server = createServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.flushHeaders();
    got(res);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  onTestFinished(() => new Promise<void>((resolve) => {
    server.closeAllConnections();
    server.close(() => resolve());
  }));
  const client = await new Promise<IncomingMessage>((resolve, reject) => {
    get({ host: '127.0.0.1', port: (server.address() as AddressInfo).port, path: '/' }, (r) => {
      r.pause();
      resolve(r);
    }).on('error', reject);
  });
  return { client, response };
}

/** Lets pending I/O callbacks run (no timing: a few turns of the event loop). */
async function turns(n = 20): Promise<void> {
  for (let i = 0; i < n; i++) await new Promise((resolve) => setImmediate(resolve));
}

function eventsOf(text: string): { event: string; data: unknown }[] {
  return [...text.matchAll(/event: (\w+)\ndata: (.*)\n\n/g)].map((m) => ({ event: m[1] as string, data: JSON.parse(m[2] as string) as unknown }));
}

describe('SSE to a slow client', () => {
  it('holds a bounded amount for it, names what it dropped, and still sends the result', async () => {
    const { client, response } = await rig();
    const res = await response;
    const events = new SseStream(res, BOUND);
    for (let i = 0; i < CHUNKS; i++) events.chunk('stdout', CHUNK);
    events.send('result', { done: true });
    await turns();
    // Written only while the socket takes it: the rest waits in (or was dropped from) the queue.
    expect(res.writableLength).toBeLessThan(4 * BOUND);

    let text = '';
    client.setEncoding('utf8');
    client.on('data', (d: string) => (text += d));
    const ended = new Promise((resolve) => client.once('end', resolve));
    client.resume();
    await events.end();
    await ended;
    const all = eventsOf(text);
    const streamed = all.filter((e) => e.event === 'stdout').reduce((n, e) => n + (e.data as string).length, 0);
    const notices = all.filter((e) => e.event === 'stderr').map((e) => e.data as string);
    const dropped = notices.reduce((n, t) => n + Number(/\[berth: (\d+) characters of output were not streamed/.exec(t)?.[1]), 0);
    expect(dropped).toBeGreaterThan(0);
    expect(streamed + dropped).toBe(CHUNKS * CHUNK.length);
    expect(all.at(-1)).toEqual({ event: 'result', data: { done: true } });
  });

  it('notices a client that went away: nothing more is written or queued for it, and end() returns', async () => {
    const { client, response } = await rig();
    const res = await response;
    const events = new SseStream(res, BOUND);
    for (let i = 0; i < CHUNKS; i++) events.chunk('stdout', CHUNK);
    await turns();
    expect(events.gone).toBe(false);
    let closed = false;
    let writesAfterClose = 0;
    const write = res.write.bind(res) as (chunk: string) => boolean;
    res.write = ((chunk: string) => {
      if (closed) writesAfterClose++;
      return write(chunk);
    }) as typeof res.write;
    const gone = new Promise((resolve) => res.once('close', resolve));
    client.socket.destroy();
    await gone;
    closed = true;
    expect(events.gone).toBe(true);
    for (let i = 0; i < 16; i++) events.chunk('stdout', CHUNK);
    events.send('result', { done: true });
    await events.end();
    expect(writesAfterClose).toBe(0);
    expect(res.writableEnded).toBe(false);
  });
});
