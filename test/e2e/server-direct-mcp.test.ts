import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import { Broker } from '../../src/broker/broker.js';
import { parseConfig } from '../../src/setup/parse-config.js';
import { BerthServer } from '../../src/server/server.js';
import { TokenStore } from '../../src/server/tokens.js';
import { rawStatus, sendRaw } from '../helpers/raw-http.js';

/*
 * MCP's requests on /mcp are served without Hono and its Node adapter, like the other hot routes
 * (src/server/direct-route.ts): every outcome must answer byte for byte as through
 * Hono. A real server over a local broker; requests are written on a raw socket, so nothing
 * between the test and the server rewrites the Host (an upper-case Host is one the adapter
 * parses, so such a request still goes through Hono: the reference).
 */

describe('MCP served without Hono', () => {
  it('answers as through Hono: no token, a metrics token, a new MCP session, a tool call, an unknown MCP session, GET and DELETE', async () => {
    const home = mkdtempSync(join(tmpdir(), 'berth-direct-mcp-'));
    // MCP over HTTP is remote: the local backend serves it only because the config says so.
    const broker = await Broker.open({
      config: parseConfig({ backend: 'local', persistent: false, server: { allowHostBackend: true } }), berthHome: home, env: { PATH: process.env['PATH'] },
    });
    const tokens = TokenStore.sharing(broker);
    const { token } = tokens.create('acme');
    const metricsToken = tokens.createMetrics().token;
    const server = await BerthServer.start({ broker, tokens, port: 0 });
    onTestFinished(async () => {
      await server.close({ graceMs: 1_000 });
      tokens.close();
      await broker.close();
      rmSync(home, { recursive: true, force: true });
    });
    const port = Number(new URL(server.url).port);
    const mcpHeaders = 'content-type: application/json\r\naccept: application/json, text/event-stream';
    const initialize = JSON.stringify({
      jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 't', version: '1' } },
    });
    const sessionOf = (answer: string): string => /\r\nmcp-session-id: ([^\r]+)/i.exec(answer)?.[1] ?? '';
    // Each MCP session is opened by its own initialize, through the path under test.
    const opened = async (host: string): Promise<string> => {
      const answer = await sendRaw(port, `POST /mcp HTTP/1.1\r\nhost: ${host}\r\nauthorization: Bearer ${token}\r\n${mcpHeaders}`, initialize);
      expect(rawStatus(answer), answer).toBe(200);
      const id = sessionOf(answer);
      const ack = await sendRaw(port, `POST /mcp HTTP/1.1\r\nhost: ${host}\r\nauthorization: Bearer ${token}\r\n${mcpHeaders}\r\nmcp-session-id: ${id}`,
        JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }));
      expect(rawStatus(ack), ack).toBe(202);
      return id;
    };
    const call = JSON.stringify({ jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'terminal', arguments: { command: 'echo hi; pwd >/dev/null' } } });
    const auth = `authorization: Bearer ${token}`;
    const cases: [string, string, (session: string) => string, string][] = [
      ['no token', 'POST', () => mcpHeaders, initialize],
      ['a metrics token', 'POST', () => `authorization: Bearer ${metricsToken}\r\n${mcpHeaders}`, initialize],
      ['a new MCP session', 'POST', () => `${auth}\r\n${mcpHeaders}`, initialize],
      ['a tool call', 'POST', (session) => `${auth}\r\n${mcpHeaders}\r\nmcp-session-id: ${session}`, call],
      ['an unknown MCP session', 'POST', () => `${auth}\r\n${mcpHeaders}\r\nmcp-session-id: 00000000-0000-4000-8000-000000000000`, call],
      ['not JSON', 'POST', (session) => `${auth}\r\ncontent-type: text/plain\r\naccept: application/json, text/event-stream\r\nmcp-session-id: ${session}`, 'hi'],
      ['GET without its stream accepted', 'GET', (session) => `${auth}\r\naccept: application/json\r\nmcp-session-id: ${session}`, ''],
      ['DELETE of an unknown MCP session', 'DELETE', () => `${auth}\r\nmcp-session-id: 00000000-0000-4000-8000-000000000000`, ''],
      ['DELETE', 'DELETE', (session) => `${auth}\r\nmcp-session-id: ${session}`, ''],
    ];
    const directSession = await opened('localhost');
    const honoSession = await opened('LOCALHOST');
    const normalized = (answer: string): string =>
      answer.replace(/\r\ndate: [^\r]*/i, '')
        // The MCP session's id, and the digest of its sandbox's directory, differ between the two.
        .replace(/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}(-[0-9a-f]{12})?/g, 'ID')
        // A command's duration, and so the length of the chunk that carries it.
        .replace(/"durationMs":\d+/g, '"durationMs":N').replace(/\r\n[0-9a-f]+\r\nevent: /g, '\r\nLENGTH\r\nevent: ');
    const seen = new Set<number>();
    for (const [what, method, headers, body] of cases) {
      const direct = await sendRaw(port, `${method} /mcp HTTP/1.1\r\nhost: localhost\r\n${headers(directSession)}`, body);
      const viaHono = await sendRaw(port, `${method} /mcp HTTP/1.1\r\nhost: LOCALHOST\r\n${headers(honoSession)}`, body);
      expect({ what, answer: normalized(direct) }).toEqual({ what, answer: normalized(viaHono) });
      seen.add(rawStatus(direct));
      if (what === 'a tool call') {
        expect(direct).toContain('hi\\n');
        // An SSE answer to a request that said `Connection: close` closes its connection (it was held open for the keep-alive timeout).
        expect(direct).toMatch(/\r\nconnection: close\r\n/i);
      }
    }
    // The cases reach the outcomes they name: success, refusals and MCP's own errors.
    expect([...seen].sort()).toEqual(expect.arrayContaining([200, 401, 403, 404]));
  });
});
