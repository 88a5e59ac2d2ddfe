import type { IncomingMessage, ServerResponse } from 'node:http';
import { DEFAULT_MAX_REQUEST_BODY_SIZE, MAX_BATCH_SIZE, requestBodyTooLargeMessage } from '@modelcontextprotocol/sdk/server/requestBody.js';
import { DEFAULT_SSE_KEEP_ALIVE_MS } from '@modelcontextprotocol/sdk/server/sseKeepAlive.js';
import { isJsonContentType } from '@modelcontextprotocol/sdk/shared/mediaType.js';
import type { Transport, TransportSendOptions } from '@modelcontextprotocol/sdk/shared/transport.js';
import {
  isInitializeRequest, isJSONRPCErrorResponse, isJSONRPCRequest, isJSONRPCResultResponse, JSONRPCMessageSchema,
  SUPPORTED_PROTOCOL_VERSIONS, type JSONRPCMessage, type MessageExtraInfo, type RequestId,
} from '@modelcontextprotocol/sdk/types.js';
import { readBody } from '../../kit/body-reader.js';

export interface NodeTransportOptions {
  /** The id the session gets when its initialize is accepted (`mcp-session-id`). */
  sessionId: string;
  /** Awaited on DELETE before the 200 (berth closes the berth session there). */
  onSessionClosed?: () => Promise<void> | void;
  /** Between keep-alive comments on open streams (default: the SDK's, 15 s). */
  keepAliveMs?: number;
}

/** One open SSE answer: a POST's (until each of its requests is answered) or the session's GET stream. */
interface SseStream {
  res: ServerResponse;
  /** The POST's requests not answered yet; the answer ends when none is left. Undefined for the GET stream. */
  pending: Set<RequestId> | undefined;
}

/** HTTP status, JSON-RPC error code, message. */
type Refusal = [number, number, string];

/**
 * The SDK's, less its `connection: keep-alive`: node:http decides that header, so a client that
 * sent `Connection: close` (or speaks HTTP/1.0) gets its connection closed after the answer
 * instead of held open until the keep-alive timeout.
 */
const SSE_HEADERS = {
  'content-type': 'text/event-stream',
  'cache-control': 'no-cache, no-transform',
  'x-accel-buffering': 'no',
};

/**
 * The MCP streamable HTTP transport of ONE stateful session, on plain node:http requests and
 * responses. It answers as the SDK's `StreamableHTTPServerTransport` does for everything berth
 * uses (no event store, no JSON-response mode, no DNS-rebinding check: berth configures none), and
 * takes the SDK's schemas and constants so a newer SDK's protocol versions flow through.
 *
 * Why not the SDK's: its node transport converts every request to a web `Request` and every answer
 * to a `ReadableStream` (@hono/node-server, TextEncoder, AbortSignal per request), which was most
 * of what MCP added over the library call. On a trivial `terminal` call (local backend, a lean
 * keep-alive client, both transports interleaved in one process, load ~5) MCP added ~540 µs at p50
 * on the SDK's transport and ~300 µs on this one.
 *
 * @example
 * ```ts
 * const transport = new NodeTransport({ sessionId: randomUUID(), onSessionClosed: () => closeBerthSession() });
 * await createMcpServer(broker, scope, info).connect(transport);
 * http.createServer((req, res) => void transport.handleRequest(req, res)).listen(8080);
 * ```
 */
export class NodeTransport implements Transport {
  /** Undefined until an initialize is accepted (the handler reads it to tell a refused initialize). */
  sessionId: string | undefined;
  onclose?: () => void;
  onerror?: (error: Error) => void;
  onmessage?: (message: JSONRPCMessage, extra?: MessageExtraInfo) => void;

  private readonly opts: NodeTransportOptions;
  private readonly open = new Set<SseStream>();
  /** Each unanswered request's answer stream: its response and related notifications go there. */
  private readonly answerOf = new Map<RequestId, SseStream>();
  private standalone: SseStream | undefined;
  private keepAlive: NodeJS.Timeout | undefined;
  private started = false;
  private closed = false;

  constructor(opts: NodeTransportOptions) {
    this.opts = opts;
  }

  async start(): Promise<void> {
    if (this.started) throw new Error('Transport already started');
    this.started = true;
    // One timer per session rather than one per answer: a comment frame keeps proxies and idle
    // timeouts from cutting a long call, and sends the headers of an answer that has none yet.
    this.keepAlive = setInterval(() => {
      for (const s of this.open) if (writable(s.res)) s.res.write(': keepalive\n\n');
    }, this.opts.keepAliveMs ?? DEFAULT_SSE_KEEP_ALIVE_MS).unref();
  }

  /**
   * Serves one HTTP request of this session (`parsedBody`: the POST body when already read).
   * Resolves once its answer is over: at once for a refusal or a 202, when the SSE answer ended
   * (or its client went away) for the rest.
   */
  async handleRequest(req: IncomingMessage, res: ServerResponse, parsedBody?: unknown): Promise<void> {
    if (this.closed) return this.refuse(res, 404, -32001, 'Session not found');
    switch (req.method) {
      case 'POST': return this.post(req, res, parsedBody);
      case 'GET': return this.get(req, res);
      case 'DELETE': return this.delete(req, res);
      default: return this.refuse(res, 405, -32000, 'Method not allowed.', { allow: 'GET, POST, DELETE' });
    }
  }

  async send(message: JSONRPCMessage, options?: TransportSendOptions): Promise<void> {
    const isResponse = isJSONRPCResultResponse(message) || isJSONRPCErrorResponse(message);
    const requestId = isResponse ? message.id : options?.relatedRequestId;
    if (requestId === undefined) {
      if (isResponse) throw new Error('Cannot send a response on a standalone SSE stream unless resuming a previous client request');
      // No GET stream open: dropped, as the SDK does without an event store.
      if (this.standalone !== undefined) this.write(this.standalone, message);
      return;
    }
    const stream = this.answerOf.get(requestId);
    if (stream === undefined) throw new Error(`No connection established for request ID: ${String(requestId)}`);
    if (!isResponse) {
      this.write(stream, message);
      return;
    }
    this.answerOf.delete(requestId);
    stream.pending!.delete(requestId);
    // The last answer ends the stream in the same write: one packet for a single-request POST.
    if (stream.pending!.size > 0) this.write(stream, message);
    else this.end(stream, message);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    clearInterval(this.keepAlive);
    for (const s of [...this.open]) this.end(s);
    this.answerOf.clear();
    this.onclose?.();
  }

  private async post(req: IncomingMessage, res: ServerResponse, parsedBody: unknown): Promise<void> {
    // Accept is a list, so a substring check is what the SDK does; Content-Type is a parsed media type.
    const accept = req.headers.accept;
    if (accept?.includes('application/json') !== true || !accept.includes('text/event-stream')) {
      return this.refuse(res, 406, -32000, 'Not Acceptable: Client must accept both application/json and text/event-stream');
    }
    if (!isJsonContentType(req.headers['content-type'])) {
      return this.refuse(res, 415, -32000, 'Unsupported Media Type: Content-Type must be application/json');
    }
    let raw = parsedBody;
    if (raw === undefined) {
      const body = await readBody(req, DEFAULT_MAX_REQUEST_BODY_SIZE);
      if (!body.ok && body.reason === 'too_large') return this.refuse(res, 413, -32000, requestBodyTooLargeMessage(DEFAULT_MAX_REQUEST_BODY_SIZE));
      try {
        raw = JSON.parse(body.ok ? body.bytes.toString('utf8') : '');
      } catch {
        return this.refuse(res, 400, -32700, 'Parse error: Invalid JSON');
      }
    }
    if (Array.isArray(raw) && raw.length > MAX_BATCH_SIZE) {
      return this.refuse(res, 400, -32600, `Invalid Request: Batch must not exceed ${MAX_BATCH_SIZE} messages`);
    }
    let messages: JSONRPCMessage[];
    try {
      messages = (Array.isArray(raw) ? raw : [raw]).map((m) => JSONRPCMessageSchema.parse(m));
    } catch {
      return this.refuse(res, 400, -32700, 'Parse error: Invalid JSON-RPC message');
    }
    // close() may have run while the body was read.
    if (this.closed) return this.refuse(res, 404, -32001, 'Session not found');

    if (messages.some(isInitialize)) {
      if (this.sessionId !== undefined) return this.refuse(res, 400, -32600, 'Invalid Request: Server already initialized');
      if (messages.length > 1) return this.refuse(res, 400, -32600, 'Invalid Request: Only one initialization request is allowed');
      this.sessionId = this.opts.sessionId;
    } else {
      const no = this.refusalOf(req);
      if (no !== undefined) return this.refuse(res, ...no);
    }

    // berth's tools read nothing of the request; the headers are what the SDK's server may read
    // (the session id, for logging levels), without copying them into an object of their own.
    const extra: MessageExtraInfo = { requestInfo: { headers: req.headers } };
    const requests = messages.filter(isJSONRPCRequest);
    if (requests.length === 0) {
      res.writeHead(202).end();
      for (const m of messages) this.onmessage?.(m, extra);
      return;
    }
    // Headers are written now and sent with the first event (or the keep-alive): no extra packet.
    res.writeHead(200, { ...SSE_HEADERS, 'mcp-session-id': this.sessionId! });
    const stream: SseStream = { res, pending: new Set(requests.map((r) => r.id)) };
    const over = this.track(stream);
    for (const r of requests) this.answerOf.set(r.id, stream);
    try {
      for (const m of messages) this.onmessage?.(m, extra);
    } catch (err) {
      // Nothing will answer these requests now: release them and end the answer.
      for (const r of requests) this.answerOf.delete(r.id);
      this.end(stream);
      throw err;
    }
    return over;
  }

  private async get(req: IncomingMessage, res: ServerResponse): Promise<void> {
    if (req.headers.accept?.includes('text/event-stream') !== true) {
      return this.refuse(res, 406, -32000, 'Not Acceptable: Client must accept text/event-stream');
    }
    const no = this.refusalOf(req);
    if (no !== undefined) return this.refuse(res, ...no);
    if (this.standalone !== undefined) return this.refuse(res, 409, -32000, 'Conflict: Only one SSE stream is allowed per session');
    // The client waits for this answer to begin before it listens: its headers go out at once.
    res.writeHead(200, { ...SSE_HEADERS, 'mcp-session-id': this.sessionId! }).flushHeaders();
    const stream: SseStream = { res, pending: undefined };
    this.standalone = stream;
    return this.track(stream);
  }

  private async delete(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const no = this.refusalOf(req);
    if (no !== undefined) return this.refuse(res, ...no);
    try {
      await this.opts.onSessionClosed?.();
    } finally {
      await this.close();
    }
    res.writeHead(200).end();
  }

  /** Why a request after initialize is refused: the session id must be this one, the protocol version one the SDK speaks. */
  private refusalOf(req: IncomingMessage): Refusal | undefined {
    const sid = req.headers['mcp-session-id'];
    if (this.sessionId === undefined) return [400, -32000, 'Bad Request: Server not initialized'];
    if (sid === undefined || sid === '') return [400, -32000, 'Bad Request: Mcp-Session-Id header is required'];
    if (sid !== this.sessionId) return [404, -32001, 'Session not found'];
    // A missing header means the version negotiated at initialize.
    const version = req.headers['mcp-protocol-version'];
    if (version === undefined || SUPPORTED_PROTOCOL_VERSIONS.includes(version as string)) return undefined;
    return [400, -32000, `Bad Request: Unsupported protocol version: ${String(version)} (supported versions: ${SUPPORTED_PROTOCOL_VERSIONS.join(', ')})`];
  }

  /**
   * Opens `stream` until its response closes. A client that goes away mid-answer only loses its
   * stream: later writes for its requests are dropped, and their mappings go as they are answered.
   */
  private track(stream: SseStream): Promise<void> {
    // Gone before its answer began (its 'close' already fired): nothing to hold open.
    if (stream.res.destroyed) return Promise.resolve();
    this.open.add(stream);
    return new Promise((resolve) => {
      stream.res.once('close', () => {
        this.open.delete(stream);
        if (this.standalone === stream) this.standalone = undefined;
        resolve();
      });
    });
  }

  private write(stream: SseStream, message: JSONRPCMessage): void {
    if (this.open.has(stream) && writable(stream.res)) stream.res.write(sseEvent(message));
  }

  /** Ends an answer, with `last` as its final event. */
  private end(stream: SseStream, last?: JSONRPCMessage): void {
    const live = this.open.delete(stream) && writable(stream.res);
    if (this.standalone === stream) this.standalone = undefined;
    if (live) stream.res.end(last === undefined ? undefined : sseEvent(last));
  }

  /** A JSON-RPC error answer with no id, told to `onerror` as the SDK's transport does. */
  private refuse(res: ServerResponse, status: number, code: number, message: string, headers: Record<string, string> = {}): void {
    this.onerror?.(new Error(message));
    res.writeHead(status, { 'content-type': 'application/json', ...headers })
      .end(JSON.stringify({ jsonrpc: '2.0', error: { code, message }, id: null }));
  }
}

/** The SDK's check, behind a look at the method: its schema's failure path costs ~6 µs per message. */
function isInitialize(m: JSONRPCMessage): boolean {
  return 'method' in m && m.method === 'initialize' && isInitializeRequest(m);
}

function sseEvent(message: JSONRPCMessage): string {
  return `event: message\ndata: ${JSON.stringify(message)}\n\n`;
}

/** Writing to an ended response emits an error nobody listens to: every write checks first. */
function writable(res: ServerResponse): boolean {
  return !res.writableEnded && !res.destroyed;
}
