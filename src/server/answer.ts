import { RESPONSE_ALREADY_SENT } from '@hono/node-server/utils/response';
import type { ApiContext } from './api-env.js';
import { drainBody } from './request.js';

/** How long a refused request body is drained before the answer goes out regardless. */
const DRAIN_MS = 5_000;

export const JSON_HEADERS: Readonly<Record<string, string>> = { 'content-type': 'application/json; charset=utf-8', 'cache-control': 'no-store' };

/**
 * Writes answers on the Node response (the Node adapter's `RESPONSE_ALREADY_SENT`). Building a
 * web `Response` instead costs about 150 µs per request through the adapter unless it replaces
 * the process's global `Response` with its own, which berth does not let it do: berth may run
 * inside an application that relies on the real one (the MCP SDK refuses it for the same reason).
 */
export interface Answers {
  /** A JSON answer with berth's headers. */
  json(c: ApiContext, body: unknown, status?: number): Promise<Response>;
  /** An answer whose body is written as given. */
  bytes(c: ApiContext, status: number, body: string | Buffer, headers: Readonly<Record<string, string>>): Promise<Response>;
}

/**
 * `closing()` says the server is shutting down: every answer then closes its connection. An
 * answer to a request whose body was not read (refused early, or never wanted) waits until the
 * body is drained: closing the socket while the client still sends would reset the connection
 * before the client read its answer. Such a connection is closed after the answer.
 */
export function answers(closing: () => boolean): Answers {
  const bytes: Answers['bytes'] = async (c, status, body, headers) => {
    const { incoming, outgoing } = c.env;
    const head: Record<string, string> = { ...headers, 'content-length': String(Buffer.byteLength(body)) };
    if (!incoming.complete && !incoming.destroyed) {
      head['connection'] = 'close';
      await drainBody(incoming, DRAIN_MS);
    }
    if (closing()) head['connection'] = 'close';
    if (!outgoing.headersSent && !outgoing.destroyed) outgoing.writeHead(status, head).end(body);
    return RESPONSE_ALREADY_SENT;
  };
  return {
    bytes,
    json: (c, body, status = 200) => bytes(c, status, JSON.stringify(body), JSON_HEADERS),
  };
}
