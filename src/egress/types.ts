import type { IpAddress } from './addresses.js';
import type { EgressCredential } from './credentials.js';
import type { EgressPolicy } from './policy.js';

/** Who a connection comes from, as events name it (never a value or placeholder). */
export interface EgressIdentity {
  tenant: string;
  profile: string;
  /** The sandbox key (`session:chat-42`, `default`, ...). */
  sandboxKey: string;
  session?: string | undefined;
  user?: string | undefined;
}

/** How a decision's traffic went: a TLS tunnel, a raw TCP tunnel, a plain HTTP request, a request inside an intercepted session. */
export type EgressChannel = 'tls-tunnel' | 'tcp-tunnel' | 'http' | 'intercepted';

/**
 * One decision of the proxy: one per tunnel, per plain HTTP request, per request inside an
 * intercepted session, per refusal. Allowed ones are reported when their traffic ends, with its
 * byte counts; refusals at once.
 */
export interface EgressEvent {
  /** When the decision was made (ms since the epoch). */
  timeMs: number;
  identity: EgressIdentity;
  host: string;
  port: number;
  channel: EgressChannel;
  allowed: boolean;
  /** The rule that decided (see `EgressDecision.rule`), or `fronting`, `host mismatch`, `exfiltration`, `upstream failed`, `proxy auth` (a wrong proxy token, 407; host `?`, at most one a minute per sandbox, the count of the others in `detail`). */
  rule: string;
  /** What the rule found (an address, the credential whose placeholder was seen), never a value. */
  detail?: string;
  /** Bytes from the sandbox upstream and back: on the wire for tunnels, bodies for HTTP requests. */
  bytesUp: number;
  bytesDown: number;
  /** Credentials whose values this request carried (swapped in or injected), sorted. */
  credentials: readonly string[];
  /** The HTTP status the sandbox got, for HTTP requests and refusals. */
  status?: number;
}

/**
 * One sandbox as the proxy sees it: who it is, what it may reach, its credentials, and where its
 * decisions go. Passed with every connection (`EgressProxy.handle`), so the proxy keeps no
 * registry of sandboxes; the same object for all of a sandbox's connections lets it keep that
 * sandbox's upstream keep-alive connections together.
 */
export interface EgressSandbox {
  identity: EgressIdentity;
  policy: EgressPolicy;
  credentials: readonly EgressCredential[];
  /** Called once per decision (see `EgressEvent`); must not throw. */
  onDecision(event: EgressEvent): void;
}

/** Bounds on what a sandbox's connections may hold or wait for. */
export interface EgressLimits {
  /** The largest request head (request line and headers), CONNECT included. Default 16 KiB. */
  headBytes: number;
  /** Time for a whole request head to arrive. Default 10 s. */
  headMs: number;
  /** A client connection with no request in flight is closed after this. Default 60 s. */
  idleMs: number;
  /** Time for a tunnel's ClientHello to arrive after the 200. Default 10 s. */
  clientHelloMs: number;
  /** Name lookups. Default 5 s. */
  lookupMs: number;
  /** Upstream TCP (and TLS) connects. Default 10 s. */
  connectMs: number;
  /** An upstream that sends nothing for this long while a request waits on it. Default 300 s. */
  upstreamIdleMs: number;
  /** A tunnel with no traffic either way for this long is closed. Default 15 min. */
  tunnelIdleMs: number;
}

export const DEFAULT_LIMITS: Readonly<EgressLimits> = Object.freeze({
  headBytes: 16 * 1024,
  headMs: 10_000,
  idleMs: 60_000,
  clientHelloMs: 10_000,
  lookupMs: 5_000,
  connectMs: 10_000,
  upstreamIdleMs: 300_000,
  tunnelIdleMs: 15 * 60_000,
});

/** What a session's requests share: the CONNECT's host and the addresses checked for it. */
export interface InterceptedSession {
  sandbox: EgressSandbox;
  host: string;
  port: number;
  addresses: readonly IpAddress[];
  rule: string;
}
