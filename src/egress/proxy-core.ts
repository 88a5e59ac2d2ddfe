import { Agent as HttpAgent, type Server, type ServerResponse } from 'node:http';
import { Agent as HttpsAgent } from 'node:https';
import type { Socket } from 'node:net';
import type { SecureContext } from 'node:tls';
import type { Logger } from '../logging/logger.js';
import type { DeniedRange } from './addresses.js';
import { answerResponse, answerSocket, refusalText } from './answers.js';
import type { EgressCa } from './ca.js';
import type { Lookup } from './target.js';
import type { EgressChannel, EgressEvent, EgressLimits, EgressSandbox, InterceptedSession } from './types.js';

/*
 * What every part of the proxy shares: its limits, its CA and upstream trust, the denied ranges,
 * the sandboxes' upstream agents and open sockets, and the one way decisions are reported.
 */

/** Idle keep-alive connections to an upstream are closed after this. */
const FREE_SOCKET_MS = 30_000;

export interface Refusal {
  host: string;
  port: number;
  channel: EgressChannel;
  rule: string;
  detail?: string | undefined;
  startedMs: number;
}

export class ProxyCore {
  readonly agents = new AgentPool();
  /** Which sandbox each client connection belongs to (set by `handle`, read by the front server's handlers). */
  readonly sandboxOf = new WeakMap<object, EgressSandbox>();
  /** Intercepted sessions by their TLS socket, which the inner server's requests carry as `req.socket`. */
  readonly sessionOf = new WeakMap<object, InterceptedSession>();
  private readonly sockets = new Map<EgressSandbox, Set<Socket>>();

  constructor(
    readonly limits: Readonly<EgressLimits>,
    readonly ca: EgressCa,
    /** Trust for upstream TLS: the system store plus the operator's bundle. */
    readonly upstreamTls: SecureContext,
    readonly lookup: Lookup,
    public denied: readonly DeniedRange[],
    readonly log: Logger,
    /** The HTTP server (never listening) that intercepted sessions' TLS sockets are handed to. */
    readonly inner: Server,
  ) {}

  /** Reports one decision to its sandbox. A callback that throws never breaks the proxy. */
  report(sandbox: EgressSandbox, event: Omit<EgressEvent, 'identity'>): void {
    try {
      sandbox.onDecision({ ...event, identity: sandbox.identity });
    } catch (e) {
      this.log.debug(`decision callback failed: ${String(e)}`);
    }
  }

  /** Answers 403 with the one-line reason (on a CONNECT's socket or a request's response) and reports it. */
  refuse(sandbox: EgressSandbox, r: Refusal, to: ServerResponse | Socket): void {
    const body = refusalText(r.host, r.port, r.rule, r.detail);
    if ('writeHead' in to) answerResponse(to, 403, body);
    else answerSocket(to, 403, body);
    this.log.debug(`${sandbox.identity.sandboxKey}: refused ${r.host}:${r.port} (${r.rule})`);
    this.report(sandbox, {
      timeMs: r.startedMs, host: r.host, port: r.port, channel: r.channel, allowed: false, rule: r.rule,
      ...(r.detail === undefined ? {} : { detail: r.detail }), bytesUp: 0, bytesDown: 0, credentials: [], status: 403,
    });
  }

  /** Keeps `socket` with its sandbox until it closes, so `release` and `close` can end it. */
  track(sandbox: EgressSandbox, socket: Socket): void {
    let set = this.sockets.get(sandbox);
    if (set === undefined) this.sockets.set(sandbox, set = new Set());
    set.add(socket);
    socket.once('close', () => {
      set.delete(socket);
      if (set.size === 0 && this.sockets.get(sandbox) === set) this.sockets.delete(sandbox);
    });
  }

  /** Ends every connection of `sandbox` and its upstream keep-alive connections. */
  release(sandbox: EgressSandbox): void {
    for (const s of this.sockets.get(sandbox) ?? []) s.destroy();
    this.sockets.delete(sandbox);
    this.agents.release(sandbox);
  }

  releaseAll(): void {
    for (const sandbox of [...this.sockets.keys()]) this.release(sandbox);
    this.agents.close();
  }
}

/**
 * Keep-alive agents, one per sandbox and upstream (scheme, host, port): requests of one sandbox
 * never ride a connection another sandbox's requests shaped.
 */
class AgentPool {
  private readonly bySandbox = new Map<EgressSandbox, Map<string, HttpAgent>>();

  get(sandbox: EgressSandbox, scheme: 'http' | 'https', host: string, port: number): HttpAgent {
    let agents = this.bySandbox.get(sandbox);
    if (agents === undefined) this.bySandbox.set(sandbox, agents = new Map());
    const key = `${scheme}://${host}:${port}`;
    let agent = agents.get(key);
    if (agent === undefined) {
      const opts = { keepAlive: true, maxFreeSockets: 8, timeout: FREE_SOCKET_MS, scheduling: 'lifo' as const };
      agent = scheme === 'https' ? new HttpsAgent(opts) : new HttpAgent(opts);
      agents.set(key, agent);
    }
    return agent;
  }

  release(sandbox: EgressSandbox): void {
    for (const a of this.bySandbox.get(sandbox)?.values() ?? []) a.destroy();
    this.bySandbox.delete(sandbox);
  }

  close(): void {
    for (const sandbox of [...this.bySandbox.keys()]) this.release(sandbox);
  }
}
