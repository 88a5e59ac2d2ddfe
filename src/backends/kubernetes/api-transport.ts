import * as http from 'node:http';
import * as https from 'node:https';
import type { Readable } from 'node:stream';
import {
  ApiException,
  HttpMethod,
  type HttpLibrary,
  type KubeConfig,
  RequestContext,
  ResponseContext,
  SelfDecodingBody,
  wrapHttpLibrary,
} from '@kubernetes/client-node';
import { tlsFailure } from './tls-failure.js';
import { DEFAULT_RETRY_POLICY, retryAfterMs, retryDelayMs, shouldRetry, type AttemptOutcome, type RetryPolicy } from './retry-policy.js';

/*
 * How berth's API requests travel (the generated clients' `httpApi`, and watches): one kept-alive
 * connection pool per cluster connection, a bound on every request, and retries as
 * retry-policy.ts allows. The client's own library opens a new agent, and so a new TCP and TLS
 * connection, for every request, and sets no timeout and never retries.
 */

export interface TransportOptions {
  /** Bound on one attempt, from sending to the whole answer (to the response headers for a watch). Default 30 s. */
  requestTimeoutMs?: number;
  retry?: RetryPolicy;
  log?: (msg: string) => void;
  /** Tests: how a retry waits, and the jitter's source. */
  sleep?: (ms: number) => Promise<void>;
  random?: () => number;
}

const DEFAULT_REQUEST_TIMEOUT_MS = 30_000;

/** An attempt that got no HTTP answer. `reached`: false when the request provably never got to the server. */
class NoAnswer extends Error {
  constructor(message: string, readonly reached: boolean, options?: ErrorOptions) {
    super(message, options);
  }
}

interface Answer {
  status: number;
  headers: http.IncomingHttpHeaders;
  response: http.IncomingMessage;
}

function headerOf(headers: http.IncomingHttpHeaders, name: string): string | undefined {
  const v = headers[name];
  return Array.isArray(v) ? v[0] : v;
}

function flatHeaders(headers: http.IncomingHttpHeaders): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(headers)) if (v !== undefined) out[k] = Array.isArray(v) ? v.join(', ') : v;
  return out;
}

function readAll(stream: Readable): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    stream.on('data', (c: Buffer) => chunks.push(c));
    stream.once('end', () => resolve(Buffer.concat(chunks)));
    stream.once('error', reject);
  });
}

/** The transport of one cluster connection. `close()` ends its pooled connections. */
export class ApiTransport {
  /** For the generated clients: a POST is sent again only after a 429. */
  readonly http: HttpLibrary;
  /** For a create whose caller takes AlreadyExists as its own earlier success: a POST may be sent again after a 5xx too. */
  readonly idempotentCreates: HttpLibrary;
  private readonly timeoutMs: number;
  private readonly policy: RetryPolicy;
  private readonly log: (msg: string) => void;
  private readonly sleep: (ms: number) => Promise<void>;
  private readonly random: () => number;
  private agent: Promise<http.Agent> | undefined;

  constructor(private readonly kc: KubeConfig, opts: TransportOptions = {}) {
    this.timeoutMs = opts.requestTimeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS;
    this.policy = opts.retry ?? DEFAULT_RETRY_POLICY;
    this.log = opts.log ?? (() => undefined);
    this.sleep = opts.sleep ?? ((ms) => new Promise((resolve) => setTimeout(resolve, ms)));
    this.random = opts.random ?? Math.random;
    this.http = wrapHttpLibrary({ send: (ctx) => this.send(ctx, false) });
    this.idempotentCreates = wrapHttpLibrary({ send: (ctx) => this.send(ctx, true) });
  }

  /** GET `path` (with `query`) as JSON; an answer other than 2xx is an ApiException, as from the generated clients. */
  async getJson(path: string, query: Record<string, string>): Promise<unknown> {
    const ctx = await this.context(path, query);
    const answer = await this.withRetries(ctx, false, false);
    const body = (await readAll(answer.response)).toString('utf8');
    if (answer.status < 200 || answer.status > 299) throw new ApiException(answer.status, `GET ${path}`, body, flatHeaders(answer.headers));
    return JSON.parse(body) as unknown;
  }

  /**
   * Opens a watch (GET `path` with `watch=1` among `query`): the body streams one JSON event a
   * line until the server ends it or `signal` aborts. The request timeout and retries cover
   * getting the response headers only.
   */
  async openWatch(path: string, query: Record<string, string>, signal: AbortSignal): Promise<Readable> {
    const ctx = await this.context(path, { ...query, watch: '1' });
    ctx.setSignal(signal);
    const answer = await this.withRetries(ctx, false, true);
    if (answer.status < 200 || answer.status > 299) {
      const body = (await readAll(answer.response)).toString('utf8');
      throw new ApiException(answer.status, `watch ${path}`, body, flatHeaders(answer.headers));
    }
    return answer.response;
  }

  /** Ends the pooled connections (a later request opens a new one). Idempotent. */
  close(): void {
    const agent = this.agent;
    this.agent = undefined;
    void agent?.then((a) => a.destroy(), () => undefined);
  }

  private async context(path: string, query: Record<string, string>): Promise<RequestContext> {
    const server = this.kc.getCurrentCluster()?.server ?? '';
    const url = new URL(server.replace(/\/$/, '') + path);
    for (const [k, v] of Object.entries(query)) url.searchParams.set(k, v);
    const ctx = new RequestContext(url.toString(), HttpMethod.GET);
    await this.kc.applySecurityAuthentication(ctx);
    return ctx;
  }

  private async send(ctx: RequestContext, idempotentCreate: boolean): Promise<ResponseContext> {
    const answer = await this.withRetries(ctx, idempotentCreate, false);
    return new ResponseContext(answer.status, flatHeaders(answer.headers), new SelfDecodingBody(readAll(answer.response)));
  }

  private async withRetries(ctx: RequestContext, idempotentCreate: boolean, streaming: boolean): Promise<Answer> {
    const method = ctx.getHttpMethod().toString();
    for (let attempt = 1; ; attempt++) {
      let outcome: AttemptOutcome;
      let answer: Answer | undefined;
      try {
        answer = await this.once(ctx, streaming);
        outcome = { kind: 'answer', status: answer.status };
      } catch (err) {
        if (!(err instanceof NoAnswer) || ctx.getSignal()?.aborted === true) throw err;
        if (!shouldRetry(this.policy, method, idempotentCreate, { kind: 'no-answer', reached: err.reached }, attempt)) throw err;
        outcome = { kind: 'no-answer', reached: err.reached };
      }
      if (answer !== undefined && !shouldRetry(this.policy, method, idempotentCreate, outcome, attempt)) return answer;
      const after = answer === undefined ? undefined : retryAfterMs(headerOf(answer.headers, 'retry-after'), Date.now());
      // The refused answer's body is not needed: drained, its connection goes back to the pool.
      answer?.response.resume();
      const delay = retryDelayMs(this.policy, attempt, after, this.random());
      this.log(`${method} ${new URL(ctx.getUrl()).pathname}: ${outcome.kind === 'answer' ? `answered ${outcome.status}` : 'no answer'}; attempt ${attempt + 1} in ${delay} ms`);
      await this.sleep(delay);
    }
  }

  /** One attempt: the answer's status and headers (its body still to read), or NoAnswer. */
  private async once(ctx: RequestContext, streaming: boolean): Promise<Answer> {
    const url = new URL(ctx.getUrl());
    const agent = await this.agentFor(ctx);
    const body = ctx.getBody();
    const outer = ctx.getSignal();
    return new Promise<Answer>((resolve, reject) => {
      const req = (url.protocol === 'https:' ? https : http).request(url, { method: ctx.getHttpMethod().toString(), headers: ctx.getHeaders(), agent, signal: outer });
      let settled = false;
      const timer = setTimeout(() => req.destroy(new NoAnswer(`no answer within ${this.timeoutMs} ms`, true)), this.timeoutMs);
      req.once('response', (res) => {
        if (streaming) clearTimeout(timer);
        else res.once('end', () => clearTimeout(timer)).once('close', () => clearTimeout(timer));
        settled = true;
        resolve({ status: res.statusCode ?? 0, headers: res.headers, response: res });
      });
      req.once('error', (err: NodeJS.ErrnoException) => {
        clearTimeout(timer);
        if (settled) return;
        if (err instanceof NoAnswer) return reject(err);
        // A certificate berth does not trust is the same on every attempt: not retried (kube-client.ts names it).
        if (tlsFailure(err) !== undefined) return reject(err);
        // Refused: it never got there. Reset before any answer on a reused socket: the server had closed it idle.
        const reached = !(err.code === 'ECONNREFUSED' || (err.code === 'ECONNRESET' && req.reusedSocket));
        reject(new NoAnswer(err.message, reached, { cause: err }));
      });
      req.end(typeof body === 'string' ? body : undefined);
    });
  }

  /**
   * The one pooled agent, with the kubeconfig's TLS material (CA, client certificate,
   * skipTLSVerify, server name). Behind a proxy the client's own agent carries the proxy, so
   * its per-request agent is used as it is.
   */
  private agentFor(ctx: RequestContext): Promise<http.Agent> {
    if (this.kc.getCurrentCluster()?.proxyUrl !== undefined) return Promise.resolve(ctx.getAgent() as http.Agent);
    this.agent ??= (async () => {
      const opts: https.RequestOptions = {};
      await this.kc.applyToHTTPSOptions(opts);
      const server = this.kc.getCurrentCluster()?.server ?? '';
      if (!server.startsWith('https:')) return new http.Agent({ keepAlive: true });
      const { ca, cert, key, pfx, passphrase, rejectUnauthorized, servername } = opts;
      return new https.Agent({ ca, cert, key, pfx, passphrase, rejectUnauthorized, servername, keepAlive: true });
    })();
    return this.agent;
  }
}
