import type { Readable, Writable } from 'node:stream';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import type { Broker } from '../../broker/broker.js';
import type { CallScopeInput } from '../../scope/call-scope.js';
import { describeSandbox } from './sandbox-description.js';
import { createMcpServer } from './server.js';
import { Logger, type LogSink } from '../../logging/logger.js';

export interface StdioOptions {
  stdin?: Readable;
  stdout?: Writable;
  /** Ends the connection early (SIGTERM, SIGINT): the session is closed as on stdin end. */
  signal?: AbortSignal;
  log?: LogSink | undefined;
}

/**
 * Serves one MCP connection over stdio as one berth session. Resolves once the connection has
 * ended (stdin closed, the transport closed, or `signal` aborted) and the session is closed.
 * Writes nothing but protocol messages to stdout.
 *
 * @example
 * ```ts
 * await serveMcpStdio(broker, { session: 'mcp-1' });
 * await broker.close();
 * ```
 * @throws the berth error `explain` throws when the scope cannot be served (before any message).
 */
export async function serveMcpStdio(broker: Broker, scope: CallScopeInput, opts: StdioOptions = {}): Promise<void> {
  const log = new Logger(opts.log).child('berth:mcp');
  const stdin = opts.stdin ?? process.stdin;
  const server = createMcpServer(broker, scope, { sandbox: describeSandbox(broker, scope), log: opts.log });
  const transport = new StdioServerTransport(stdin, opts.stdout ?? process.stdout);
  const ended = new Promise<void>((resolve) => {
    server.server.onclose = () => resolve();
  });
  // A client's malformed message: its own business (info, not warn).
  server.server.onerror = (err) => log.info(`stdio: ${err.message}`);
  const end = (): void => void server.close().catch((e: unknown) => log.warn(`close: ${String(e)}`));
  stdin.once('end', end);
  stdin.once('close', end);
  opts.signal?.addEventListener('abort', end, { once: true });
  try {
    await server.connect(transport);
    if (opts.signal?.aborted) end();
    await ended;
  } finally {
    stdin.off('end', end);
    stdin.off('close', end);
    opts.signal?.removeEventListener('abort', end);
    const closed = await broker.closeSession(scope).catch((e: unknown) => {
      log.warn(`close session: ${String(e)}`);
      return undefined;
    });
    if (closed !== undefined) log.info(`session closed; removed [${closed.removed.join(', ')}], kept [${closed.kept.join(', ')}]`);
  }
}
