import { createServer, type IncomingMessage, type Server, type ServerOptions, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { Logger } from '../logging/logger.js';
import { answerResponse, answerSocket, PROXY_AUTHENTICATE, unauthenticatedText } from './answers.js';
import type { EgressCa } from './ca.js';
import { onConnect } from './connect.js';
import { onInterceptedRequest } from './intercept.js';
import { onPlainRequest } from './plain-http.js';
import { ProxyCore } from './proxy-core.js';
import { RefusalFold } from './refusal-fold.js';
import { boundedLookup, deniedRanges, systemResolver, type ExtraDenied, type Resolver } from './target.js';
import { DEFAULT_LIMITS, type EgressLimits, type EgressSandbox } from './types.js';
import { upstreamContext, type UpstreamTrust } from './upstream-trust.js';

/*
 * The egress proxy: one per berth process, fed the connections of every sandbox (each with that
 * sandbox's context), built on node:net, node:http and node:tls (docs/egress.md says why no proxy
 * library). Connections are parsed by an HTTP server that never listens: berth accepts them on
 * each sandbox's own listener and hands them over, so the sandbox a connection comes from is
 * known from where it arrived, never from anything the sandbox says.
 */

export interface EgressProxyOptions {
  /** The installation's CA (`EgressCa.open`): signs the leaves of intercepted hosts. */
  ca: EgressCa;
  /** Whom upstream TLS is verified against (the system store plus an optional operator bundle). */
  upstreamTrust?: UpstreamTrust;
  /** Ranges refused besides the always-denied ones and the host's own addresses (berth's sandbox networks). */
  extraDenied?: readonly ExtraDenied[];
  limits?: Partial<EgressLimits>;
  /** How often the host's own addresses are read again (default 30 s; tests shorten it). */
  hostAddressesMs?: number;
  log?: Logger;
  /**
   * How names not in a policy's `hosts:` are resolved (default: the system resolver). Every
   * answer is checked like any other; a cluster's own DNS can be plugged in here.
   */
  resolve?: Resolver;
}

/**
 * What a gate answers for a request's `Proxy-Authorization`: its sandbox, or why not (answered
 * 407), or `full`: the sandbox already holds all the connections it may (closed unanswered).
 */
export type GateAnswer = { sandbox: EgressSandbox } | { refused: string; claimed?: EgressSandbox } | { full: EgressSandbox };

/**
 * Who decides which sandbox a connection of a shared listener belongs to (shared-listener.ts):
 * the first request's proxy credential names it, and the connection stays that sandbox's.
 */
export interface ProxyGate {
  /** `socket`, when given, is the connection the credential came on: counted against its sandbox's bound. */
  authenticate(proxyAuthorization: string | undefined, socket?: Socket): GateAnswer;
  /** A refusal that names no sandbox: the gate logs it. */
  unclaimed(what: string, from: string | undefined): void;
}

/** How often the proxy reads the host's interface addresses again (each sandbox attached reads them too). */
const HOST_ADDRESSES_EVERY_MS = 30_000;

/**
 * Builds the proxy. Nothing listens: call `handle` with each accepted connection.
 *
 * @example
 * const proxy = createEgressProxy({ ca: await EgressCa.open(join(home, 'egress')) });
 * sandboxListener.on('connection', (socket) => proxy.handle(socket, sandboxContext));
 * // ...
 * await proxy.close();
 * @throws ConfigError for an operator CA bundle that does not parse, Error for a bad extra range.
 */
export function createEgressProxy(options: EgressProxyOptions): EgressProxy {
  const limits = Object.freeze({ ...DEFAULT_LIMITS, ...options.limits });
  const log = (options.log ?? Logger.silent()).child('berth:egress');
  const inner = startHeadTimeouts(createServer(serverOptions(limits)));
  const core = new ProxyCore(
    limits, options.ca, upstreamContext(options.upstreamTrust), boundedLookup(options.resolve ?? systemResolver, limits.lookupMs),
    deniedRanges(options.extraDenied), log, inner,
  );
  inner.on('request', (req, res) => onInterceptedRequest(core, req, res));
  inner.on('upgrade', (_req, socket: Socket) => answerSocket(socket, 501, 'berth egress: protocol upgrades are not passed through an intercepted session\n'));
  return new EgressProxy(core, options.extraDenied ?? [], options.hostAddressesMs ?? HOST_ADDRESSES_EVERY_MS);
}

export class EgressProxy implements AsyncDisposable {
  private readonly front: Server;
  /** The gate of each connection a shared listener handed over, until its first request names its sandbox. */
  private readonly gateOf = new WeakMap<Socket, ProxyGate>();
  /** A sandbox's wrong-token refusals: one audited a minute, the others counted into the next. */
  private readonly authRefusals = new RefusalFold(60_000);
  /** The host's addresses read again now and then: an address it gains later (a new bridge, a lease) is its own too. */
  private readonly rereadAddresses: NodeJS.Timeout;
  private closed = false;

  /** @internal built by `createEgressProxy`. */
  constructor(private readonly core: ProxyCore, private readonly extraDenied: readonly ExtraDenied[], hostAddressesMs: number) {
    this.rereadAddresses = setInterval(() => this.refreshHostAddresses(), hostAddressesMs);
    this.rereadAddresses.unref();
    this.front = startHeadTimeouts(createServer(serverOptions(core.limits)));
    this.front.on('request', (req, res) => {
      const sandbox = this.sandboxOf(req, res);
      if (sandbox !== undefined) onPlainRequest(core, sandbox, req, res).catch((e: unknown) => failed(core, e, res));
    });
    this.front.on('connect', (req, socket: Socket, head: Buffer) => {
      const sandbox = this.sandboxOf(req, socket);
      if (sandbox !== undefined) onConnect(core, sandbox, req, socket, head).catch((e: unknown) => failed(core, e, socket));
    });
    this.front.on('upgrade', (_req, socket: Socket) => answerSocket(socket, 501, 'berth egress: protocol upgrades over plain HTTP are not supported; use https:// (CONNECT)\n'));
  }

  /**
   * Serves one client connection of `sandbox` (accepted on that sandbox's own listener, or, for
   * a remote sandbox, after the caller authenticated it). The context is the sandbox's identity,
   * policy, credentials and decision callback; pass the same object for all its connections.
   */
  handle(socket: Socket, sandbox: EgressSandbox): void {
    if (this.closed) {
      socket.destroy();
      return;
    }
    this.core.sandboxOf.set(socket, sandbox);
    this.core.track(sandbox, socket);
    socket.setNoDelay(true);
    this.front.emit('connection', socket);
  }

  /**
   * Serves one connection of a shared listener: the sandbox is the one `gate` finds in the first
   * request's proxy credential (407 without one), and every later request of the connection is
   * that sandbox's.
   */
  handleGated(socket: Socket, gate: ProxyGate): void {
    if (this.closed) {
      socket.destroy();
      return;
    }
    this.gateOf.set(socket, gate);
    socket.setNoDelay(true);
    this.front.emit('connection', socket);
  }

  /** The sandbox a request's connection belongs to; undefined once it was answered (407) or dropped. */
  private sandboxOf(req: IncomingMessage, to: ServerResponse | Socket): EgressSandbox | undefined {
    const socket = req.socket;
    const bound = this.core.sandboxOf.get(socket);
    if (bound !== undefined) return bound;
    const gate = this.gateOf.get(socket);
    if (gate === undefined) {
      to.destroy();
      return undefined;
    }
    const answer = gate.authenticate(req.headers['proxy-authorization'], socket);
    if ('full' in answer) {
      socket.destroy();
      return undefined;
    }
    if ('sandbox' in answer) {
      this.core.sandboxOf.set(socket, answer.sandbox);
      this.core.track(answer.sandbox, socket);
      return answer.sandbox;
    }
    const body = unauthenticatedText(answer.refused);
    if ('writeHead' in to) {
      answerResponse(to, 407, body, { ...PROXY_AUTHENTICATE, connection: 'close' });
    } else {
      // node:http hands a CONNECT's socket over without its own error handling.
      to.on('error', () => to.destroy());
      answerSocket(to, 407, body, PROXY_AUTHENTICATE);
    }
    if (answer.claimed === undefined) {
      gate.unclaimed(answer.refused, socket.remoteAddress);
      return undefined;
    }
    // Whoever sent it proved nothing: no host of theirs, and at most one row a minute.
    const unfolded = this.authRefusals.take(foldKey(answer.claimed));
    if (unfolded !== undefined) this.reportAuth(answer.claimed, req.method === 'CONNECT' ? 'tcp-tunnel' : 'http', answer.refused, unfolded.folded);
    return undefined;
  }

  private reportAuth(sandbox: EgressSandbox, channel: 'tcp-tunnel' | 'http', refused: string, folded: number): void {
    const detail = folded === 0 ? refused : `${refused} (and ${folded} more refused with 407 since the last such entry, not recorded one by one)`;
    this.core.report(sandbox, {
      timeMs: Date.now(), host: '?', port: 0, channel, allowed: false, rule: 'proxy auth', detail, bytesUp: 0, bytesDown: 0, credentials: [], status: 407,
    });
  }

  /** The CA certificate (PEM) sandboxes must trust for their intercepted hosts. */
  get caCertPem(): string {
    return this.core.ca.certPem;
  }

  /** Reads the host's interface addresses again (after an interface came or went). */
  refreshHostAddresses(): void {
    this.core.denied = deniedRanges(this.extraDenied);
  }

  /** Ends every connection of `sandbox` and drops its upstream keep-alive connections (the sandbox is going). */
  release(sandbox: EgressSandbox): void {
    const folded = this.authRefusals.drain(foldKey(sandbox));
    if (folded > 0) this.reportAuth(sandbox, 'http', `${folded} more refused with 407 since the last such entry, not recorded one by one`, 0);
    this.core.release(sandbox);
  }

  /** Ends every connection; idempotent. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    clearInterval(this.rereadAddresses);
    this.core.releaseAll();
    await Promise.all([closeServer(this.front), closeServer(this.core.inner)]);
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}

/** One sandbox, whichever context object it was registered with (a later call's replaces it). */
function foldKey(sandbox: EgressSandbox): string {
  const { tenant, profile, sandboxKey } = sandbox.identity;
  return `${tenant}\0${profile}\0${sandboxKey}`;
}

/** A bug in a handler ends that one connection, never the process berth runs in. */
function failed(core: ProxyCore, e: unknown, end: { destroy(): void }): void {
  core.log.debug(`internal error: ${e instanceof Error ? e.stack ?? e.message : String(e)}`);
  end.destroy();
}

function serverOptions(limits: Readonly<EgressLimits>): ServerOptions {
  return {
    maxHeaderSize: limits.headBytes,
    headersTimeout: limits.headMs,
    // A request body may take as long as it takes; a stalled one ends at the socket's idle timeout.
    requestTimeout: 0,
    keepAliveTimeout: limits.idleMs,
    connectionsCheckingInterval: Math.min(1_000, limits.headMs),
  };
}

/**
 * node:http checks head timeouts only for servers that listen; these never do. Starting its
 * checker by hand ('listening' is the event it waits for) bounds a client that sends nothing.
 */
function startHeadTimeouts(server: Server): Server {
  server.emit('listening');
  return server;
}

function closeServer(server: Server): Promise<void> {
  return new Promise((resolve) => server.close(() => resolve()));
}
