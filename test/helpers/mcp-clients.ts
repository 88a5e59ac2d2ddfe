import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { Broker } from '../../src/broker/broker.js';
import { createMcpHttpHandler, type McpHttpHandler, type McpHttpOptions } from '../../src/server/mcp/http.js';
import { BERTH_BIN } from './cli.js';

/*
 * Real MCP clients from the SDK against berth: `berth mcp` spawned over stdio, and the streamable
 * HTTP handler mounted on a loopback server with a stand-in for bearer auth (x-test-tenant).
 */

export interface McpConn {
  client: Client;
  /** What the server wrote to stderr so far (stdio only; empty for HTTP). */
  stderr(): string;
  /** Ends the MCP session the way a client does (stdio: close stdin; HTTP: DELETE, then close). */
  close(): Promise<void>;
}

export interface ToolAnswer {
  text: string;
  isError: boolean;
  structured: Record<string, unknown>;
}

/** Calls a tool and flattens the answer; rejects (McpError) on a protocol error. */
export async function call(conn: McpConn, name: string, args: Record<string, unknown>, timeoutMs = 60_000): Promise<ToolAnswer> {
  const r = await conn.client.callTool({ name, arguments: args }, undefined, { timeout: timeoutMs });
  const content = (r.content ?? []) as Array<{ type: string; text?: string }>;
  return {
    text: content.map((c) => c.text ?? '').join('\n'),
    isError: r.isError === true,
    structured: (r.structuredContent ?? {}) as Record<string, unknown>,
  };
}

function clientOf(): Client {
  return new Client({ name: 'berth-test', version: '0.0.0' });
}

/** Spawns `node bin/berth.js mcp ARGS` (the built dist) in `cwd` and connects a client to it. */
export async function stdioConn(opts: { cwd: string; env: NodeJS.ProcessEnv; args?: string[] }): Promise<McpConn> {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(opts.env)) if (v !== undefined) env[k] = v;
  const transport = new StdioClientTransport({
    command: process.execPath, args: [BERTH_BIN, 'mcp', ...(opts.args ?? [])], cwd: opts.cwd, env, stderr: 'pipe',
  });
  let stderr = '';
  transport.stderr?.on('data', (d: Buffer) => (stderr += d.toString('utf8')));
  const client = clientOf();
  try {
    await client.connect(transport);
  } catch (err) {
    await transport.close().catch(() => undefined);
    throw new Error(`berth mcp did not start: ${(err as Error).message}; stderr: ${stderr}`);
  }
  return { client, stderr: () => stderr, close: () => client.close() };
}

export interface HttpMcp {
  url: URL;
  handler: McpHttpHandler;
  close(): Promise<void>;
}

/**
 * The MCP handler on a bare loopback server; the tenant is the `x-test-tenant` header (absent: 401)
 * and the profiles it may use are `x-test-profiles` (comma-separated; default: `default` and `bot`).
 */
export async function startHttpMcp(broker: Broker, opts: Partial<McpHttpOptions> = {}): Promise<HttpMcp> {
  const handler = createMcpHttpHandler(broker, {
    callerOf: (req: IncomingMessage) => {
      const t = req.headers['x-test-tenant'];
      const p = req.headers['x-test-profiles'];
      const profiles = typeof p === 'string' ? p.split(',') : ['default', 'bot'];
      return typeof t === 'string' && t !== '' ? { tenant: t, profiles } : undefined;
    },
    ...opts,
  });
  const server: Server = createServer((req, res) => {
    handler(req, res).catch((err: unknown) => {
      if (!res.headersSent) res.writeHead(500).end(String(err));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: new URL(`http://127.0.0.1:${port}/mcp`),
    handler,
    async close() {
      await handler.close();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/**
 * A client over streamable HTTP. `auth` is a tenant for `startHttpMcp` (sent as x-test-tenant) or
 * `{ token }` for a real `berth serve`; `headers` adds x-berth-profile, x-berth-user.
 */
export async function httpConn(url: URL, auth: string | { token: string }, headers: Record<string, string> = {}): Promise<McpConn & { sessionId(): string | undefined }> {
  const authHeader: Record<string, string> = typeof auth === 'string' ? { 'x-test-tenant': auth } : { authorization: `Bearer ${auth.token}` };
  const transport = new StreamableHTTPClientTransport(url, { requestInit: { headers: { ...authHeader, ...headers } } });
  const client = clientOf();
  await client.connect(transport);
  return {
    client,
    stderr: () => '',
    sessionId: () => transport.sessionId,
    async close() {
      await transport.terminateSession().catch(() => undefined);
      await client.close();
    },
  };
}
