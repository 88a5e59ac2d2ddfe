import { request, type IncomingHttpHeaders, type IncomingMessage } from 'node:http';

/*
 * MCP over streamable HTTP with bare node:http requests: what a client sees on the wire (status,
 * headers, SSE events), with no SDK client in between to retry, reconnect or hide a refusal.
 */

/** The headers every MCP POST carries. */
export const MCP_POST = { accept: 'application/json, text/event-stream', 'content-type': 'application/json' };

export interface RawAnswer { status: number; headers: IncomingHttpHeaders; text: string }

/** One request, its whole answer read. `body`: a string as is, anything else as JSON, undefined for none. */
export function send(url: string | URL, body: unknown, headers: Record<string, string> = {}, method = 'POST'): Promise<RawAnswer> {
  const text = typeof body === 'string' ? body : body === undefined ? '' : JSON.stringify(body);
  return new Promise((resolve, reject) => {
    const req = request(url, { method, headers: { ...MCP_POST, ...headers } }, (res) => {
      let out = '';
      res.setEncoding('utf8').on('data', (c: string) => (out += c));
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, text: out }));
    });
    req.on('error', reject);
    req.end(text);
  });
}

export interface OpenStream {
  res: IncomingMessage;
  /** The next chunk of the body as it arrives. */
  next(): Promise<string>;
  /** The rest of the body, up to its end. */
  rest(): Promise<string>;
  /** Goes away mid-answer (destroys the socket). */
  destroy(): void;
}

/** A request whose answer is read as it streams: resolves once its headers arrived. */
export function openStream(url: string | URL, body: unknown, headers: Record<string, string> = {}, method = 'POST'): Promise<OpenStream> {
  return new Promise((resolve, reject) => {
    const req = request(url, { method, headers: { ...MCP_POST, ...headers } }, (res) => {
      let unread = '';
      let ended = false;
      let wake: (() => void) | undefined;
      res.setEncoding('utf8');
      res.on('data', (c: string) => {
        unread += c;
        wake?.();
      });
      res.on('end', () => {
        ended = true;
        wake?.();
      });
      const take = async (all: boolean): Promise<string> => {
        while (!ended && (all || unread === '')) await new Promise<void>((r) => (wake = r));
        const out = unread;
        unread = '';
        return out;
      };
      resolve({ res, next: () => take(false), rest: () => take(true), destroy: () => req.destroy() });
    });
    // The tests that destroy a request expect its socket to hang up.
    req.on('error', (e) => (e.message === 'socket hang up' ? undefined : reject(e)));
    req.end(body === undefined ? undefined : JSON.stringify(body));
  });
}

/** The `data:` of each SSE `message` event in `text`, parsed. */
export function sseEvents(text: string): Array<Record<string, unknown>> {
  return text.split('\n\n').filter((e) => e.startsWith('event: message\n'))
    .map((e) => JSON.parse(e.slice(e.indexOf('data: ') + 'data: '.length)) as Record<string, unknown>);
}

/** A JSON-RPC error answer's `error` (a refusal carries `id: null`). */
export function rpcError(a: RawAnswer): { code: number; message: string } {
  const body = JSON.parse(a.text) as { id: unknown; error: { code: number; message: string } };
  if (body.id !== null) throw new Error(`a refusal answers id null, got ${JSON.stringify(body.id)}: ${a.text}`);
  return body.error;
}

/** A `tools/call` request, with `_meta` (a progressToken) when given. */
export function toolCall(id: number, name: string, args: Record<string, unknown> = {}, meta?: Record<string, unknown>): Record<string, unknown> {
  return { jsonrpc: '2.0', id, method: 'tools/call', params: { name, arguments: args, ...(meta === undefined ? {} : { _meta: meta }) } };
}
