import type { z } from 'zod';
import { BerthError, UsageError } from '../errors.js';
import { OPERATIONS, type OperationId } from './operations.js';
import { errorOfAnswer, unreachable } from './remote-error.js';

/** One request: path parameters, a query string, and a JSON body or raw bytes. */
export interface Request {
  params?: Record<string, string>;
  query?: Record<string, string | number | undefined>;
  json?: unknown;
  /** Raw bytes, or a stream of them with its length (sent as Content-Length, never chunked). */
  bytes?: Uint8Array | { stream: AsyncIterable<Uint8Array>; size: number };
  accept?: string;
  signal?: AbortSignal | undefined;
}

export interface TransportOptions {
  /** The server's base URL, as `berth serve` prints it (`http://127.0.0.1:7878`). */
  url: string;
  /** A bearer token from `berth token create --tenant T`; sent in the Authorization header only. */
  token: string;
  /** The fetch to use (default: the global one). */
  fetch?: typeof fetch;
}

/**
 * The client's one way to the server: each operation by its route id, the bearer token on every
 * request, and every failure turned into the `BerthError` the library would throw.
 */
export class Transport {
  readonly url: string;
  private readonly authorization: string;
  private readonly fetch: typeof fetch;

  constructor(opts: TransportOptions) {
    this.url = baseUrl(opts.url);
    if (typeof opts.token !== 'string' || opts.token.trim() === '') {
      throw new UsageError('the berth client needs a token: create one with `berth token create --tenant T` and pass it as `token`');
    }
    this.authorization = `Bearer ${opts.token.trim()}`;
    this.fetch = opts.fetch ?? globalThis.fetch;
  }

  /** Sends the request; resolves with the response of a 2xx status, throws the answer's error otherwise. */
  async send(id: OperationId, req: Request = {}): Promise<Response> {
    const op = OPERATIONS[id];
    const route = `${op.method} ${op.path}`;
    const headers: Record<string, string> = { authorization: this.authorization };
    if (req.accept !== undefined) headers['accept'] = req.accept;
    let body: RequestInit['body'];
    if (req.json !== undefined) {
      headers['content-type'] = 'application/json';
      body = JSON.stringify(req.json);
    } else if (req.bytes instanceof Uint8Array) {
      headers['content-type'] = 'application/octet-stream';
      body = req.bytes;
    } else if (req.bytes !== undefined) {
      headers['content-type'] = 'application/octet-stream';
      headers['content-length'] = String(req.bytes.size);
      body = streamOf(req.bytes.stream);
    }
    let res: Response;
    try {
      res = await this.fetch(this.url + pathOf(op.path, req.params) + queryOf(req.query), {
        method: op.method, headers, body, signal: req.signal, ...(body instanceof ReadableStream ? { duplex: 'half' } : {}),
      });
    } catch (err) {
      if (req.signal?.aborted === true) throw req.signal.reason;
      throw unreachable(this.url, route, err);
    }
    if (res.ok) return res;
    throw errorOfAnswer(res.status, await answerOf(res), route);
  }

  /** Sends the request and checks its JSON answer against the server's own response schema. */
  async json<S extends z.ZodType>(id: OperationId, schema: S, req: Request = {}): Promise<z.output<S>> {
    const res = await this.send(id, req);
    const op = OPERATIONS[id];
    return answerShape(schema, await answerOf(res), `${op.method} ${op.path}`);
  }
}

/** An answer checked against the server's own response schema: a shape the client does not know is a version mismatch, said so. */
export function answerShape<S extends z.ZodType>(schema: S, value: unknown, route: string): z.output<S> {
  const answer = schema.safeParse(value);
  if (answer.success) return answer.data;
  const issue = answer.error.issues[0];
  throw new BerthError('internal',
    `${route} answered a shape this client does not know (${issue?.path.join('.') ?? ''}: ${issue?.message ?? ''}): ` +
    'the client and the server are of different berth versions; use the same version on both');
}

function baseUrl(url: string): string {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new UsageError(`the berth client's url ${JSON.stringify(url)} is not a URL: pass the one \`berth serve\` prints (http://127.0.0.1:7878)`);
  }
  if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') {
    throw new UsageError(`the berth client's url ${JSON.stringify(url)} is not http or https: pass the one \`berth serve\` prints (http://127.0.0.1:7878)`);
  }
  return parsed.href.replace(/\/+$/, '');
}

function pathOf(path: string, params: Record<string, string> = {}): string {
  return path.replace(/\{(\w+)\}/g, (_, name: string) => encodeURIComponent(params[name] ?? ''));
}

function queryOf(query: Record<string, string | number | undefined> = {}): string {
  const search = new URLSearchParams();
  for (const [k, v] of Object.entries(query)) if (v !== undefined) search.set(k, String(v));
  const s = search.toString();
  return s === '' ? '' : `?${s}`;
}

/** The body of an answer: its JSON, or its text when it is none. */
async function answerOf(res: Response): Promise<unknown> {
  const text = await res.text();
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return text;
  }
}

function streamOf(source: AsyncIterable<Uint8Array>): ReadableStream<Uint8Array> {
  const it = source[Symbol.asyncIterator]();
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      const next = await it.next();
      if (next.done === true) controller.close();
      else controller.enqueue(next.value);
    },
    async cancel() {
      await it.return?.();
    },
  });
}
