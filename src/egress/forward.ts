import { request as httpRequest, type ClientRequest, type IncomingMessage, type ServerResponse } from 'node:http';
import { request as httpsRequest, type RequestOptions as HttpsRequestOptions } from 'node:https';
import type { Socket } from 'node:net';
import type { IpAddress } from './addresses.js';
import { answerResponse, failureText } from './answers.js';
import { hostInList } from './credentials.js';
import { rewriteHeaders } from './placeholder-swap.js';
import type { ProxyCore } from './proxy-core.js';
import { pinnedLookup } from './target.js';
import type { EgressChannel, EgressSandbox } from './types.js';

/*
 * One HTTP request on its way out, for both plain HTTP (`GET http://host/...` to the proxy) and
 * a request inside an intercepted TLS session: the head rewritten (placeholders, injection,
 * hop-by-hop headers), sent to a checked address over the sandbox's keep-alive agent for that
 * host, the answer streamed back, and one event when it ends.
 */

/** Where a decided request goes. */
export interface Upstream {
  scheme: 'http' | 'https';
  host: string;
  port: number;
  /** The checked addresses: the only ones a new upstream connection may go to. */
  addresses: readonly IpAddress[];
  /** The rule that allowed it. */
  rule: string;
  channel: EgressChannel;
  /** When the request's decision was made. */
  startedMs: number;
}

const HOP_BY_HOP_RESPONSE = new Set(['connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'proxy-authenticate', 'trailer', 'upgrade']);

/** Sends `req` upstream and its answer back to `res`; reports one event when `res` is done. */
export function forward(core: ProxyCore, sandbox: EgressSandbox, req: IncomingMessage, res: ServerResponse, up: Upstream): void {
  const { host, port } = up;
  // Credentials go out over TLS only: over plain HTTP every placeholder is a stray one.
  const credentials = up.scheme === 'https' ? sandbox.credentials : sandbox.credentials.map((c) => ({ ...c, hosts: [] }));
  const rewritten = rewriteHeaders(req.rawHeaders, host, credentials);
  if (!rewritten.ok) {
    const own = up.scheme === 'http' && sandbox.credentials.some((c) => c.name === rewritten.credential && hostInList(host, c.hosts));
    const detail = own ? `${rewritten.credential} is sent over HTTPS only` : `a placeholder of ${rewritten.credential}`;
    core.refuse(sandbox, { host, port, channel: up.channel, rule: 'exfiltration', detail, startedMs: up.startedMs }, res);
    return;
  }
  let bytesUp = 0;
  let bytesDown = 0;
  let status: number | undefined;
  let failure: string | undefined;
  const path = up.scheme === 'http' ? pathOf(req.url ?? '/') : req.url ?? '/';
  // A chunked body stays chunked upstream: sent unframed (node does so for a GET without a
  // length), its bytes would read as further requests that no check has seen.
  if (req.headers['transfer-encoding'] !== undefined) rewritten.headers['Transfer-Encoding'] = 'chunked';
  const options = {
    host, port, method: req.method, path, headers: rewritten.headers, setHost: false,
    agent: core.agents.get(sandbox, up.scheme, host, port), lookup: pinnedLookup(up.addresses),
  };
  let out: ClientRequest;
  try {
    out = up.scheme === 'https'
      ? httpsRequest({ ...options, servername: host, secureContext: core.upstreamTls, ALPNProtocols: ['http/1.1'] } as HttpsRequestOptions)
      : httpRequest(options);
  } catch (e) {
    // A head node will not send (a credential value with a line break in it): never half-sent.
    const what = `request cannot be sent (${(e as NodeJS.ErrnoException).code ?? 'error'})`;
    answerResponse(res, 502, failureText(host, port, what));
    core.report(sandbox, { timeMs: up.startedMs, host, port, channel: up.channel, allowed: true, rule: up.rule, detail: what, bytesUp: 0, bytesDown: 0, credentials: [], status: 502 });
    return;
  }

  out.on('socket', (s: Socket) => watchConnect(s, core.limits.connectMs, out.destroy.bind(out)));
  out.setTimeout(core.limits.upstreamIdleMs, () => out.destroy(Object.assign(new Error('sent nothing'), { code: 'EGRESS_IDLE' })));
  out.on('response', (answer) => {
    status = answer.statusCode ?? 502;
    try {
      res.writeHead(status, answer.statusMessage, responseHeaders(answer.rawHeaders));
    } catch {
      answer.destroy();
      res.destroy();
      return;
    }
    answer.on('data', (chunk: Buffer) => { bytesDown += chunk.length; });
    answer.pipe(res);
    answer.on('error', () => res.destroy());
  });
  out.on('error', (e: NodeJS.ErrnoException) => {
    failure = upstreamFailure(e);
    status = timedOut(e) ? 504 : 502;
    answerResponse(res, status, failureText(host, port, failure));
  });
  req.on('data', (chunk: Buffer) => { bytesUp += chunk.length; });
  req.pipe(out);
  res.on('close', () => {
    if (!res.writableFinished) out.destroy();
    core.report(sandbox, {
      timeMs: up.startedMs, host, port, channel: up.channel, allowed: true, rule: up.rule,
      ...(failure === undefined ? {} : { detail: failure }),
      bytesUp, bytesDown, credentials: rewritten.credentials, ...(status === undefined ? {} : { status }),
    });
  });
}

/** Fails a new connection (TCP, and TLS when it is one) that has not connected (and finished TLS) within `ms`. */
export function watchConnect(s: Socket, ms: number, fail: (e: Error) => void): void {
  if (!s.connecting) return;
  const timer = setTimeout(() => fail(Object.assign(new Error(`no connection within ${ms} ms`), { code: 'EGRESS_CONNECT_TIMEOUT' })), ms);
  const done = (): void => clearTimeout(timer);
  s.once('secureConnect', done).once('connect', () => {
    if (!('encrypted' in s)) done();
  }).once('close', done);
}

function timedOut(e: NodeJS.ErrnoException): boolean {
  return e.code === 'EGRESS_CONNECT_TIMEOUT' || e.code === 'EGRESS_IDLE' || e.code === 'ETIMEDOUT';
}

/** One line about what went wrong upstream, for the 502/504 body and the event. */
export function upstreamFailure(e: NodeJS.ErrnoException): string {
  if (e.code === 'EGRESS_CONNECT_TIMEOUT') return `upstream did not connect in time (${e.message})`;
  if (e.code === 'EGRESS_IDLE') return 'upstream sent nothing in time';
  if (typeof e.code === 'string' && (e.code.startsWith('ERR_TLS_') || /CERT|SELF_SIGNED|UNABLE_TO/.test(e.code))) {
    return `upstream certificate not trusted (${e.code}: ${e.message})`;
  }
  return `upstream failed (${e.code ?? 'error'}: ${e.message})`;
}

/** The upstream's headers without the ones that belong to its hop, as a flat raw list. */
function responseHeaders(raw: readonly string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i + 1 < raw.length; i += 2) {
    if (!HOP_BY_HOP_RESPONSE.has(raw[i]!.toLowerCase())) out.push(raw[i]!, raw[i + 1]!);
  }
  return out;
}

/** `http://host/a?b` -> `/a?b`. */
function pathOf(absolute: string): string {
  const u = new URL(absolute);
  return `${u.pathname}${u.search}`;
}
