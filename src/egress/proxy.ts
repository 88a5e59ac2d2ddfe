import { createServer, type Server, type ServerOptions } from 'node:http';
import type { Socket } from 'node:net';
import { Logger } from '../logging/logger.js';
import { answerSocket } from './answers.js';
import type { EgressCa } from './ca.js';
import { onConnect } from './connect.js';
import { onInterceptedRequest } from './intercept.js';
import { onPlainRequest } from './plain-http.js';
import { ProxyCore } from './proxy-core.js';
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
  log?: Logger;
  /**
   * How names not in a policy's `hosts:` are resolved (default: the system resolver). Every
   * answer is checked like any other; a cluster's own DNS can be plugged in here.
   */
  resolve?: Resolver;
}

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
  return new EgressProxy(core, options.extraDenied ?? []);
}

export class EgressProxy implements AsyncDisposable {
  private readonly front: Server;
  private closed = false;

  /** @internal built by `createEgressProxy`. */
  constructor(private readonly core: ProxyCore, private readonly extraDenied: readonly ExtraDenied[]) {
    this.front = startHeadTimeouts(createServer(serverOptions(core.limits)));
    this.front.on('request', (req, res) => {
      const sandbox = core.sandboxOf.get(req.socket);
      if (sandbox === undefined) res.destroy();
      else onPlainRequest(core, sandbox, req, res).catch((e: unknown) => failed(core, e, res));
    });
    this.front.on('connect', (req, socket: Socket, head: Buffer) => {
      const sandbox = core.sandboxOf.get(socket);
      if (sandbox === undefined) socket.destroy();
      else onConnect(core, sandbox, req, socket, head).catch((e: unknown) => failed(core, e, socket));
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
    this.core.release(sandbox);
  }

  /** Ends every connection; idempotent. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.core.releaseAll();
    await Promise.all([closeServer(this.front), closeServer(this.core.inner)]);
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
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
