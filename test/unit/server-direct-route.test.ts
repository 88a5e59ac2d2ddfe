import { createServer, type Server } from 'node:http';
import { describe, expect, it, onTestFinished } from 'vitest';
import { BerthError } from '../../src/errors.js';
import { createApp } from '../../src/server/app.js';
import type { MetricsEdge } from '../../src/server/metrics.js';
import type { OverviewStreams } from '../../src/server/overview-stream.js';
import { TokenStore } from '../../src/server/tokens.js';
import { startStubServer, stubBroker } from '../helpers/stub-server.js';
import { rawStatus, sendRaw } from '../helpers/raw-http.js';
import { Logger } from '../../src/logging/logger.js';

/*
 * The hot routes (an authenticated route with a fixed path, POST /v1/exec first) are served
 * without Hono and its Node adapter. Requests are written on a raw socket, so nothing
 * between the test and the server rewrites the target or the Host.
 */

describe('routes served without Hono', () => {
  it('an authenticated route with a fixed path is served directly when the adapter would take the request as it is; any other request is not', async () => {
    const broker = stubBroker();
    const tokens = TokenStore.open(broker.berthHome);
    const { direct } = createApp({
      broker, tokens, mcp: async () => undefined, callers: new WeakMap(), draining: () => false, tokensChanged: () => undefined, log: Logger.silent(), faults: new WeakMap(),
      metrics: { refused: () => undefined } as unknown as MetricsEdge, overview: {} as OverviewStreams,
    });
    // What the app does not serve directly answers 599 here (in berth, it goes on to the adapter).
    const server: Server = createServer((req, res) => {
      if (!direct(req, res)) res.writeHead(599).end();
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    onTestFinished(() => {
      server.close();
      tokens.close();
    });
    const port = (server.address() as { port: number }).port;
    const served = async (requestLine: string, host: string | undefined = 'localhost'): Promise<boolean> => {
      const answer = await sendRaw(port, `${requestLine}${host === undefined ? '' : `\r\nhost: ${host}`}`);
      // Served directly, a request without a token is berth's 401.
      if (rawStatus(answer) === 401) return true;
      expect(rawStatus(answer)).toBe(599);
      return false;
    };

    for (const line of ['POST /v1/exec HTTP/1.1', 'POST /v1//exec/ HTTP/1.1', 'POST /v1/exec?x=1 HTTP/1.1', 'POST /v1/exec/stream HTTP/1.1',
      'POST /v1/sessions/close HTTP/1.1', 'GET /v1/whoami HTTP/1.1', 'GET /v1/sandboxes HTTP/1.1', 'PUT /v1/files?path=a HTTP/1.1',
      // MCP's methods on /mcp: a tool call is a POST.
      'POST /mcp HTTP/1.1', 'GET /mcp HTTP/1.1', 'DELETE /mcp HTTP/1.1']) {
      expect({ line, served: await served(line) }).toEqual({ line, served: true });
    }
    expect(await served('POST /v1/exec HTTP/1.1', 'localhost:7878')).toBe(true);
    expect(await served('POST /v1/exec HTTP/1.0', undefined)).toBe(true);

    for (const line of [
      'GET /v1/exec HTTP/1.1', // 405
      'HEAD /v1/whoami HTTP/1.1', // 405
      'POST /v1/%65xec HTTP/1.1', // no route
      'POST /v1/nothing HTTP/1.1',
      'GET /v1/health HTTP/1.1', // public
      'GET /metrics HTTP/1.1', // a metrics token's
      'PUT /mcp HTTP/1.1', // a method MCP does not use: its own transport refuses it, through Hono
      'GET /v1/jobs/job_0123456789abcdef HTTP/1.1', // a path parameter
      'POST /v1/exec?a=%20 HTTP/1.1', // the adapter parses such a target
      'POST /v1/./exec HTTP/1.1',
    ]) {
      expect({ line, served: await served(line) }).toEqual({ line, served: false });
    }
    // A Host the adapter parses (and might refuse) goes through it.
    expect(await served('POST /v1/exec HTTP/1.1', 'LOCALHOST')).toBe(false);
    expect(await served('POST /v1/exec HTTP/1.1', 'localhost:80')).toBe(false);
  });

  it('answers exactly as Hono and its adapter do: status, headers and body of every outcome of POST /v1/exec', async () => {
    const { url, token } = await startStubServer(stubBroker({
      exec: async (_scope: unknown, command: string) => {
        if (command === 'fail') throw new BerthError('sandbox_start_failed', 'the sandbox did not start; look at the engine');
        return {
          stdout: 'out', stderr: '', exitCode: 0, cwd: '/w', durationMs: 1, timedOut: false, truncated: false, sandboxId: 'sb', fullOutputPath: '/host/path',
        };
      },
    }), onTestFinished);
    const port = Number(new URL(url).port);
    const auth = `authorization: Bearer ${token}`;
    const json = 'content-type: application/json';
    const cases: [string, string, string][] = [
      ['a result', `${auth}\r\n${json}`, JSON.stringify({ session: 's', command: 'true' })],
      ['a broker error', `${auth}\r\n${json}`, JSON.stringify({ session: 's', command: 'fail' })],
      ['no token', json, JSON.stringify({ session: 's', command: 'true' })],
      ['a bad token', `authorization: Bearer berth_${'x'.repeat(43)}\r\n${json}`, JSON.stringify({ command: 'true' })],
      ['bad JSON', `${auth}\r\n${json}`, '{"command":'],
      ['not JSON', `${auth}\r\ncontent-type: text/plain`, 'true'],
      ['an unknown field', `${auth}\r\n${json}`, JSON.stringify({ command: 'true', shell: 'zsh' })],
      ['a tenant field', `${auth}\r\n${json}`, JSON.stringify({ command: 'true', tenant: 'other' })],
      ['a profile the token lacks', `${auth}\r\n${json}`, JSON.stringify({ command: 'true', profile: 'admin' })],
      ['a stream', `${auth}\r\n${json}\r\naccept: text/event-stream`, JSON.stringify({ session: 's', command: 'true' })],
    ];
    const normalized = (answer: string): string => answer.replace(/\r\ndate: [^\r]*/i, '');
    for (const [what, headers, body] of cases) {
      const direct = await sendRaw(port, `POST /v1/exec HTTP/1.1\r\nhost: localhost\r\n${headers}`, body);
      // An upper-case Host is one the adapter parses: the request goes through Hono.
      const viaHono = await sendRaw(port, `POST /v1/exec HTTP/1.1\r\nhost: LOCALHOST\r\n${headers}`, body);
      expect({ what, answer: normalized(direct) }).toEqual({ what, answer: normalized(viaHono) });
      expect(rawStatus(direct)).toBeGreaterThanOrEqual(200);
    }
  });
});
