import { mkdtempSync, realpathSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import { Broker } from '../../src/broker/broker.js';
import { parseConfig } from '../../src/setup/parse-config.js';
import { BerthServer } from '../../src/server/server.js';
import { TokenStore } from '../../src/server/tokens.js';
import { openStream, send, type OpenStream } from '../helpers/mcp-raw.js';

/*
 * An MCP session's notification stream (GET /mcp) outlives every request, so no request's token
 * check covers it: a revoked token's open stream, and its session's place under
 * limits.mcpSessions, end at the next request the server gets, of any kind. A real server on a
 * local broker, over real sockets; the revoke goes through another connection to the state, as
 * `berth token revoke` in another process does, or through the server's own store.
 */

const INIT = { jsonrpc: '2.0', id: 0, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'raw', version: '1' } } };

interface Setup {
  url: string;
  home: string;
  tokens: TokenStore;
  server: BerthServer;
}

/** A server whose tenants may hold one MCP session each. */
async function start(): Promise<Setup> {
  const home = realpathSync(mkdtempSync(join(tmpdir(), 'berth-mcp-revoke-')));
  const config = parseConfig({ backend: 'local', persistent: false, server: { allowHostBackend: true }, limits: { mcpSessions: 1 } });
  const broker = await Broker.open({ config, berthHome: home, env: { PATH: process.env['PATH'] } });
  const tokens = TokenStore.sharing(broker);
  const server = await BerthServer.start({ broker, tokens, port: 0 });
  onTestFinished(async () => {
    await server.close({ graceMs: 1_000 });
    tokens.close();
    await broker.close();
    rmSync(home, { recursive: true, force: true });
  });
  return { url: `${server.url}/mcp`, home, tokens, server };
}

const bearer = (token: string): Record<string, string> => ({ authorization: `Bearer ${token}` });

/** initialize and initialized with `token`: the session's headers. */
async function openSession(url: string, token: string): Promise<Record<string, string>> {
  const init = await send(url, INIT, bearer(token));
  expect(init.status, init.text).toBe(200);
  const headers = { ...bearer(token), 'mcp-session-id': init.headers['mcp-session-id'] as string };
  expect((await send(url, { jsonrpc: '2.0', method: 'notifications/initialized' }, headers)).status).toBe(202);
  return headers;
}

/** The session's GET stream, with `token`. */
async function openNotifications(url: string, session: Record<string, string>, token: string): Promise<{ stream: OpenStream; ended: () => boolean }> {
  const stream = await openStream(url, undefined, { ...session, ...bearer(token), accept: 'text/event-stream' }, 'GET');
  expect(stream.res.statusCode).toBe(200);
  let ended = false;
  stream.res.on('close', () => (ended = true));
  return { stream, ended: () => ended };
}

/** Resolves once `ended()`, or fails after `timeoutMs`. */
async function until(ended: () => boolean, timeoutMs: number): Promise<void> {
  for (const deadline = Date.now() + timeoutMs; !ended(); await new Promise((r) => setTimeout(r, 50))) {
    if (Date.now() > deadline) throw new Error(`still open after ${timeoutMs} ms`);
  }
}

describe('berth serve: a revoked token\'s MCP stream', () => {
  /** Requests of every kind: a public route, one without a token, another tenant's call. */
  const ANY: Record<string, (s: Setup, other: string) => Promise<number>> = {
    'GET /v1/health': async (s) => (await fetch(`${s.server.url}/v1/health`)).status,
    'a request without a token': async (s) => (await fetch(`${s.server.url}/v1/whoami`)).status,
    'another tenant\'s call': async (s, other) => (await fetch(`${s.server.url}/v1/whoami`, { headers: bearer(other) })).status,
  };

  it.each([
    ['another connection to the state, as berth token revoke does', 'GET /v1/health', 'other', 200],
    ['another connection to the state, as berth token revoke does', 'a request without a token', 'other', 401],
    ['another connection to the state, as berth token revoke does', 'another tenant\'s call', 'other', 200],
    ['the server\'s own token store', 'GET /v1/health', 'own', 200],
  ] as const)('revoked through %s, then %s: the stream ends, and the tenant may open a session again', async (_what, kind, through, status) => {
    const s = await start();
    const a = s.tokens.create('acme');
    const fresh = s.tokens.create('acme').token;
    const other = s.tokens.create('beta').token;
    const session = await openSession(s.url, a.token);
    const { ended } = await openNotifications(s.url, session, a.token);

    // The tenant's one session is taken: a fresh token of the same tenant is refused.
    const refused = await send(s.url, INIT, bearer(fresh));
    expect([refused.status, refused.text]).toEqual([429, expect.stringContaining('limits.mcpSessions')]);

    if (through === 'other') {
      const cli = TokenStore.open(s.home);
      expect(cli.revoke(a.entry.id)).toBe(true);
      cli.close();
    } else {
      expect(s.tokens.revoke(a.entry.id)).toBe(true);
    }
    // Nothing ends it before a request comes; then any request does.
    await new Promise((r) => setTimeout(r, 300));
    expect(ended()).toBe(false);
    expect(await ANY[kind]!(s, other)).toBe(status);
    await until(ended, 3_000);

    await openSession(s.url, fresh);
    // The old session is gone, whatever token asks for it.
    const old = await send(s.url, { jsonrpc: '2.0', id: 9, method: 'tools/list' }, { ...session, ...bearer(fresh) });
    expect(old.status).toBe(404);
  }, 30_000);

  it('a stream opened with another token of the tenant ends the session when that token is revoked', async () => {
    const s = await start();
    const opener = s.tokens.create('acme').token;
    const streamer = s.tokens.create('acme');
    const session = await openSession(s.url, opener);
    const { ended } = await openNotifications(s.url, session, streamer.token);
    s.tokens.revoke(streamer.entry.id);
    const api = await fetch(`${s.server.url}/v1/whoami`, { headers: bearer(opener) });
    expect(api.status).toBe(200);
    await until(ended, 3_000);
    expect((await send(s.url, INIT, bearer(opener))).status).toBe(200);
  }, 30_000);

  it('revoking another token, of this tenant or another, or creating one, ends nothing', async () => {
    const s = await start();
    const mine = s.tokens.create('acme').token;
    const spare = s.tokens.create('acme');
    const theirs = s.tokens.create('beta');
    const session = await openSession(s.url, mine);
    const { ended } = await openNotifications(s.url, session, mine);
    s.tokens.revoke(spare.entry.id);
    s.tokens.revoke(theirs.entry.id);
    s.tokens.create('gamma');
    expect((await fetch(`${s.server.url}/v1/health`)).status).toBe(200);
    expect((await fetch(`${s.server.url}/v1/whoami`, { headers: bearer(mine) })).status).toBe(200);
    await new Promise((r) => setTimeout(r, 500));
    expect(ended()).toBe(false);
    const listed = await send(s.url, { jsonrpc: '2.0', id: 3, method: 'tools/list' }, session);
    expect(listed.status, listed.text).toBe(200);
  }, 30_000);
});
