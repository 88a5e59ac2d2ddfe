import type { IncomingMessage } from 'node:http';
import { connect as netConnect, type Socket } from 'node:net';
import { answerSocket, failureText, TLS_ACCESS_DENIED } from './answers.js';
import { parseClientHello } from './client-hello.js';
import { hostInList } from './credentials.js';
import { upstreamFailure, watchConnect } from './forward.js';
import { intercept } from './intercept.js';
import { parseTarget, splitHostPort, type Target } from './names.js';
import { strayPlaceholder } from './placeholder-swap.js';
import type { ProxyCore } from './proxy-core.js';
import { pinnedLookup, resolveTarget, type Resolved } from './target.js';
import type { EgressChannel, EgressSandbox } from './types.js';

/*
 * `CONNECT host:port`: decided before anything is answered (403 with the reason), then one of
 *  - a TLS tunnel (a name allowed on 443): upstream connected, 200, and the client's ClientHello
 *    read and its server name checked against the CONNECT before any byte goes upstream;
 *  - an intercepted session (a credential host): 200, the ClientHello checked, TLS terminated
 *    with a leaf for the host (intercept.ts);
 *  - a raw TCP tunnel (`host:` and `cidr:` entries): upstream connected, 200, bytes piped.
 * The upstream is connected before the 200 so that a failure can still answer 502/504.
 */

const ESTABLISHED = 'HTTP/1.1 200 Connection Established\r\n\r\n';

export async function onConnect(core: ProxyCore, sandbox: EgressSandbox, req: IncomingMessage, socket: Socket, head: Buffer): Promise<void> {
  const startedMs = Date.now();
  // node:http hands the socket over without its own error handling.
  socket.on('error', () => socket.destroy());
  socket.setNoDelay(true);
  const authority = req.url ?? '';
  const hp = splitHostPort(authority);
  const target = hp === undefined ? undefined : parseTarget(hp.host);
  if (hp === undefined || target === undefined) {
    answerSocket(socket, 400, `berth egress: CONNECT needs host:port with a host name or an IP address, got "${authority.slice(0, 100)}"\n`);
    return;
  }
  const host = target.kind === 'name' ? target.name : target.text;
  const port = hp.port;
  const stray = strayPlaceholder(authority, host, sandbox.credentials);
  if (stray !== undefined) {
    core.refuse(sandbox, { host, port, channel: 'tcp-tunnel', rule: 'exfiltration', detail: `a placeholder of ${stray.name}`, startedMs }, socket);
    return;
  }
  let resolved: Resolved;
  try {
    resolved = await resolveTarget(sandbox.policy, target, port, 'connect', core.denied, core.lookup);
  } catch (e) {
    const what = `cannot be looked up (${(e as Error).message})`;
    failBeforeTunnel(core, sandbox, socket, { host, port, startedMs, channel: 'tcp-tunnel', allowed: false, rule: 'lookup failed' }, what, e);
    return;
  }
  const { decision, addresses } = resolved;
  const channel = decision.carry === 'tls' ? 'tls-tunnel' : 'tcp-tunnel';
  if (!decision.allowed) {
    core.refuse(sandbox, { host, port, channel, rule: decision.rule, detail: decision.detail, startedMs }, socket);
    return;
  }
  if (decision.carry === 'tls' && target.kind === 'name' && sandbox.credentials.some((c) => hostInList(target.name, c.hosts))) {
    socket.write(ESTABLISHED);
    const hello = await checkedClientHello(core, socket, head, target);
    if (typeof hello === 'string') {
      refuseTunnel(core, sandbox, socket, { host, port, startedMs }, hello);
      return;
    }
    intercept(core, sandbox, socket, hello, { host, port, addresses, rule: decision.rule });
    return;
  }
  let upstream: Socket;
  try {
    upstream = await connectUpstream(target, port, resolved, core.limits.connectMs);
  } catch (e) {
    failBeforeTunnel(core, sandbox, socket, { host, port, startedMs, channel, allowed: true, rule: decision.rule }, upstreamFailure(e as NodeJS.ErrnoException), e);
    return;
  }
  core.track(sandbox, upstream);
  if (socket.destroyed) {
    // The client left while the upstream was connecting.
    upstream.destroy();
    return;
  }
  socket.write(ESTABLISHED);
  let first = head;
  if (decision.carry === 'tls') {
    const hello = await checkedClientHello(core, socket, head, target);
    if (typeof hello === 'string') {
      upstream.destroy();
      refuseTunnel(core, sandbox, socket, { host, port, startedMs }, hello);
      return;
    }
    first = hello;
  }
  pipeTunnel(core, sandbox, socket, upstream, first, { timeMs: startedMs, host, port, channel, rule: decision.rule });
}

/**
 * The bytes of the client's ClientHello when its server name is the CONNECT's name, else why not
 * (`fronting` or `bad client hello`, with what was found). Waits at most `clientHelloMs`.
 */
async function checkedClientHello(core: ProxyCore, socket: Socket, head: Buffer, target: Target): Promise<Buffer | string> {
  const got = await readClientHello(socket, head, core.limits.clientHelloMs);
  if (typeof got === 'string') return `bad client hello: ${got}`;
  const { hello, data } = got;
  const sni = hello.serverName?.toLowerCase().replace(/\.$/, '');
  if (target.kind === 'name' && sni !== target.name) {
    return sni === undefined ? 'fronting: the ClientHello names no server' : `fronting: the ClientHello names "${sni.slice(0, 100)}"`;
  }
  return data;
}

/** Reads until the ClientHello is complete; the socket is left paused with nothing consumed. */
function readClientHello(socket: Socket, head: Buffer, timeoutMs: number):
Promise<{ hello: { serverName: string | undefined }; data: Buffer } | string> {
  return new Promise((resolve) => {
    let data = head;
    const finish = (r: { hello: { serverName: string | undefined }; data: Buffer } | string): void => {
      clearTimeout(timer);
      socket.off('data', onData).off('end', onEnd).off('close', onEnd);
      socket.pause();
      resolve(r);
    };
    const check = (): boolean => {
      const r = parseClientHello(data);
      if (r.kind === 'partial') return false;
      finish(r.kind === 'invalid' ? r.reason : { hello: r, data });
      return true;
    };
    const onData = (chunk: Buffer): void => {
      data = data.length === 0 ? chunk : Buffer.concat([data, chunk]);
      check();
    };
    const onEnd = (): void => finish('the client closed before its ClientHello');
    const timer = setTimeout(() => finish(`no complete ClientHello within ${timeoutMs} ms`), timeoutMs);
    if (data.length > 0 && check()) return;
    if (socket.destroyed) {
      onEnd();
      return;
    }
    socket.on('data', onData).once('end', onEnd).once('close', onEnd);
    socket.resume();
  });
}

/** A TCP connection to a checked address of `target`, within `timeoutMs`. */
function connectUpstream(target: Target, port: number, resolved: Resolved, timeoutMs: number): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const s = target.kind === 'ip'
      ? netConnect({ host: target.text, port })
      : netConnect({ host: target.name, port, lookup: pinnedLookup(resolved.addresses), autoSelectFamily: true });
    watchConnect(s, timeoutMs, (e) => s.destroy(e));
    s.once('connect', () => {
      s.off('error', reject);
      s.setNoDelay(true);
      resolve(s);
    }).once('error', reject);
  });
}

/** Bytes both ways until either side is done; one event when both are closed. */
function pipeTunnel(
  core: ProxyCore, sandbox: EgressSandbox, client: Socket, upstream: Socket, first: Buffer,
  at: { timeMs: number; host: string; port: number; channel: EgressChannel; rule: string },
): void {
  let open = 2;
  const closed = (): void => {
    if (--open > 0) return;
    core.report(sandbox, { ...at, allowed: true, bytesUp: upstream.bytesWritten, bytesDown: upstream.bytesRead, credentials: [] });
  };
  client.setTimeout(core.limits.tunnelIdleMs, () => client.destroy());
  upstream.on('error', () => client.destroy());
  // The client's end goes upstream as a half close; a closed upstream ends the client once its data is out.
  client.once('close', () => upstream.destroy()).once('close', closed);
  upstream.once('close', () => {
    if (!client.writableEnded) client.end();
    closed();
  });
  if (first.length > 0) upstream.write(first);
  client.pipe(upstream);
  upstream.pipe(client);
  client.resume();
}

function refuseTunnel(core: ProxyCore, sandbox: EgressSandbox, socket: Socket, at: { host: string; port: number; startedMs: number }, why: string): void {
  const colon = why.indexOf(': ');
  const rule = why.slice(0, colon);
  // After the 200 the refusal can only be TLS's own: a fatal access_denied alert.
  socket.end(TLS_ACCESS_DENIED);
  core.log.debug(`${sandbox.identity.sandboxKey}: refused tunnel ${at.host}:${at.port} (${why})`);
  core.report(sandbox, {
    timeMs: at.startedMs, host: at.host, port: at.port, channel: 'tls-tunnel', allowed: false, rule, detail: why.slice(colon + 2),
    bytesUp: 0, bytesDown: 0, credentials: [],
  });
}

interface FailedAt {
  host: string;
  port: number;
  startedMs: number;
  channel: EgressChannel;
  /** Whether the policy had allowed it (an upstream that failed) or could not decide (a name that did not resolve). */
  allowed: boolean;
  rule: string;
}

/** Answers 502 (504 for a timeout) before any 200, and reports it. */
function failBeforeTunnel(core: ProxyCore, sandbox: EgressSandbox, socket: Socket, at: FailedAt, what: string, e: unknown): void {
  const code = (e as NodeJS.ErrnoException).code;
  const status = code === 'EGRESS_CONNECT_TIMEOUT' || code === 'ETIMEOUT' || code === 'ETIMEDOUT' ? 504 : 502;
  answerSocket(socket, status, failureText(at.host, at.port, what));
  core.report(sandbox, {
    timeMs: at.startedMs, host: at.host, port: at.port, channel: at.channel, allowed: at.allowed, rule: at.rule, detail: what,
    bytesUp: 0, bytesDown: 0, credentials: [], status,
  });
}
