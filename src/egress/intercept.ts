import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { TLSSocket } from 'node:tls';
import { forward } from './forward.js';
import { hostHeaderMatches } from './host-header.js';
import { strayPlaceholder } from './placeholder-swap.js';
import type { ProxyCore } from './proxy-core.js';
import type { EgressSandbox, InterceptedSession } from './types.js';

/*
 * An intercepted session: TLS to a credential host, terminated here with a leaf certificate the
 * installation's CA signed for that host (and only http/1.1 offered), so that its requests can
 * carry the credential's value. Each request inside is checked (its Host must be the session's
 * host, no placeholder may go where it does not belong) and forwarded over verified TLS.
 */

/** Terminates TLS on `socket` (whose ClientHello, already read, is `hello`) and serves its requests. */
export function intercept(core: ProxyCore, sandbox: EgressSandbox, socket: Socket, hello: Buffer, s: Omit<InterceptedSession, 'sandbox'>): void {
  core.ca.secureContextFor(s.host).then((secureContext) => {
    if (socket.destroyed) return;
    // The ClientHello goes back in front of what the socket has not read yet, for TLS to read.
    socket.unshift(hello);
    const tls = new TLSSocket(socket, { isServer: true, secureContext, ALPNProtocols: ['http/1.1'] });
    core.sessionOf.set(tls, { sandbox, ...s });
    tls.on('error', (e) => {
      core.log.debug(`${sandbox.identity.sandboxKey}: intercepted ${s.host}: ${e.message}`);
      tls.destroy();
    });
    core.track(sandbox, tls);
    core.inner.emit('connection', tls);
  }, (e: unknown) => {
    core.log.debug(`${sandbox.identity.sandboxKey}: no leaf for ${s.host}: ${String(e)}`);
    socket.destroy();
  });
}

/** A request inside an intercepted session (the inner server's `request` handler). */
export function onInterceptedRequest(core: ProxyCore, req: IncomingMessage, res: ServerResponse): void {
  const s = core.sessionOf.get(req.socket);
  if (s === undefined) {
    res.destroy();
    return;
  }
  const startedMs = Date.now();
  const at = { host: s.host, port: s.port, channel: 'intercepted' as const, startedMs };
  const url = req.url ?? '';
  const absolute = /^https?:\/\//i.test(url) ? safeUrl(url) : undefined;
  const named = absolute?.host ?? req.headers.host;
  if (!hostHeaderMatches(req.headers.host, s.host, s.port, 443) || (absolute !== undefined && !hostHeaderMatches(absolute.host, s.host, s.port, 443))) {
    const detail = `the request names ${(named ?? '(no host)').slice(0, 100)} inside a session to ${s.host}`;
    core.refuse(s.sandbox, { ...at, rule: 'host mismatch', detail }, res);
    return;
  }
  const stray = strayPlaceholder(url, s.host, s.sandbox.credentials);
  if (stray !== undefined) {
    core.refuse(s.sandbox, { ...at, rule: 'exfiltration', detail: `a placeholder of ${stray.name}` }, res);
    return;
  }
  if (absolute !== undefined) req.url = `${absolute.pathname}${absolute.search}`;
  forward(core, s.sandbox, req, res, { scheme: 'https', host: s.host, port: s.port, addresses: s.addresses, rule: s.rule, channel: 'intercepted', startedMs });
}

function safeUrl(text: string): URL | undefined {
  try {
    return new URL(text);
  } catch {
    return undefined;
  }
}
