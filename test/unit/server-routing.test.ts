import { connect } from 'node:net';
import { describe, expect, it, onTestFinished } from 'vitest';
import { startStubServer, stubBroker, type StubServer } from '../helpers/stub-server.js';

/*
 * How a request target finds its route, as berth answered before /v1 moved onto Hono: written
 * on a raw socket, so nothing between the test and the server rewrites the target.
 */

async function raw(s: StubServer, method: string, target: string, withToken: boolean): Promise<{ status: number; allow?: string; code?: string; body?: string }> {
  const port = new URL(s.url).port;
  const text = await new Promise<string>((resolve, reject) => {
    const socket = connect(Number(port), '127.0.0.1');
    let out = '';
    socket.on('data', (d: Buffer) => (out += d.toString('latin1')));
    socket.on('end', () => resolve(out));
    socket.on('error', reject);
    socket.write(`${method} ${target} HTTP/1.1\r\nhost: localhost\r\n${withToken ? `authorization: Bearer ${s.token}\r\n` : ''}connection: close\r\n\r\n`);
  });
  const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(text)?.[1]);
  const allow = /\r\nallow: ([^\r]*)/i.exec(text)?.[1];
  const code = /"code":"([a-z_]+)"/.exec(text)?.[1];
  const body = method === 'HEAD' ? { body: text.slice(text.indexOf('\r\n\r\n') + 4) } : {};
  return { status, ...(allow !== undefined ? { allow } : {}), ...(code !== undefined ? { code } : {}), ...body };
}

describe('routing', () => {
  it('HEAD on a public page answers as GET does, without a token and without a body; elsewhere 401 without a token, then 405 naming the methods', async () => {
    const s = await startStubServer(stubBroker(), onTestFinished);
    for (const withToken of [false, true]) {
      expect(await raw(s, 'HEAD', '/', withToken)).toEqual({ status: 200, body: '' });
      expect(await raw(s, 'HEAD', '/v1/health', withToken)).toEqual({ status: 200, body: '' });
    }
    expect(await raw(s, 'HEAD', '/v1/jobs/job_0123456789abcdef', false)).toMatchObject({ status: 401 });
    expect(await raw(s, 'HEAD', '/v1/jobs/job_0123456789abcdef', true)).toMatchObject({ status: 405, allow: 'GET, DELETE' });
    expect(await raw(s, 'HEAD', '/v1/nothing', true)).toMatchObject({ status: 404 });
  });

  it('empty segments and a trailing slash do not matter', async () => {
    const s = await startStubServer(stubBroker(), onTestFinished);
    expect(await raw(s, 'GET', '//v1/health', false)).toEqual({ status: 200 });
    expect(await raw(s, 'GET', '/v1//health/', false)).toEqual({ status: 200 });
    expect(await raw(s, 'POST', '/v1//health', true)).toMatchObject({ status: 405, allow: 'GET' });
  });

  it('a path is matched as sent: an escaped letter is no route, a malformed escape is no route (after the token)', async () => {
    const s = await startStubServer(stubBroker(), onTestFinished);
    expect(await raw(s, 'GET', '/v1/%6aobs', true)).toEqual({ status: 404, code: 'not_found' });
    expect(await raw(s, 'GET', '/v1/jobs/%zz', false)).toEqual({ status: 401, code: 'unauthorized' });
    expect(await raw(s, 'GET', '/v1/jobs/%zz', true)).toEqual({ status: 404, code: 'not_found' });
    expect(await raw(s, 'POST', '/v1/jobs/%ff', true)).toEqual({ status: 404, code: 'not_found' });
    // A well-formed escape in a parameter is decoded, then checked.
    expect(await raw(s, 'GET', '/v1/jobs/job_0123%2F', true)).toMatchObject({ status: 400, code: 'bad_request' });
  });
});
