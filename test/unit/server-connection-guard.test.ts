import { createServer, type IncomingMessage } from 'node:http';
import { connect, type AddressInfo, type Socket } from 'node:net';
import { describe, expect, it, onTestFinished } from 'vitest';
import { ConnectionGuard, httpServerOptions, type ClosedReason } from '../../src/server/connection-guard.js';

/*
 * ConnectionGuard's body-stall rule on a real node:http server and a raw socket, ordered by the
 * server's own timer events (no sleeps): a body berth held back is not the client's silence.
 */

const SETTINGS = { maxConnections: 100, maxConnectionsPerAddress: 100, headerTimeoutSeconds: 5, keepAliveSeconds: 5, bodyStallSeconds: 1 };

describe('ConnectionGuard', () => {
  it('gives a client a whole bound after berth reads its held-back body again', async () => {
    const closed: ClosedReason[] = [];
    const guard = new ConnectionGuard(SETTINGS, { closed: (r) => closed.push(r), refused: () => {} }, () => {});
    let held: IncomingMessage | undefined;
    const server = createServer(httpServerOptions(SETTINGS), (req, res) => {
      guard.request(req, res);
      // The call waits for its session: berth does not read the body yet.
      req.pause();
      held = req;
      let body = '';
      req.on('data', (b: Buffer) => (body += b.toString()));
      req.on('end', () => res.end(`got ${body}`));
    });
    guard.attach(server);
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    onTestFinished(() => new Promise<void>((r) => { server.closeAllConnections(); server.close(() => r()); }));

    const client: Socket = connect((server.address() as AddressInfo).port, '127.0.0.1');
    client.on('error', () => {});
    let answer = '';
    client.on('data', (b) => {
      answer += b.toString();
      if (answer.includes('got helloworld')) client.end();
    });
    const ended = new Promise<void>((r) => client.on('close', () => r()));
    client.write('POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 10\r\n\r\nhello');

    // The guard's timer fires each bound; this listener runs after the guard's.
    let fires = 0;
    let openAtSecondLook: boolean | undefined;
    server.on('timeout', () => {
      fires++;
      // First look: the body is held back (unread). berth reads again now.
      if (fires === 1) held!.resume();
      // Second look: nothing came since berth read again, but the client was held back until then.
      // The connection must still be open: the client sends the rest now.
      if (fires === 2) {
        openAtSecondLook = closed.length === 0;
        if (openAtSecondLook) client.write('world');
      }
    });
    await ended;
    expect(openAtSecondLook).toBe(true);
    expect(answer).toMatch(/^HTTP\/1\.1 200/);
    expect(answer).toContain('got helloworld');
    // Answered, then closed by the client or the keep-alive bound: never as a stalled body.
    expect(closed).not.toContain('body_stall');
  });

  it('cuts a body whose client stays silent for the bound while berth reads', async () => {
    const closed: ClosedReason[] = [];
    const guard = new ConnectionGuard(SETTINGS, { closed: (r) => closed.push(r), refused: () => {} }, () => {});
    const server = createServer(httpServerOptions(SETTINGS), (req, res) => {
      guard.request(req, res);
      req.resume();
      req.on('end', () => res.end('ok'));
    });
    guard.attach(server);
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    onTestFinished(() => new Promise<void>((r) => { server.closeAllConnections(); server.close(() => r()); }));

    const client = connect((server.address() as AddressInfo).port, '127.0.0.1');
    client.on('error', () => {});
    let answer = '';
    client.on('data', (b) => (answer += b.toString()));
    const ended = new Promise<void>((r) => client.on('close', () => r()));
    client.write('POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 10\r\n\r\nhello');
    await ended;
    expect(answer).toBe('');
    expect(closed).toEqual(['body_stall']);
  });
});
