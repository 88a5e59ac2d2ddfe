import { lookup } from 'node:dns/promises';
import type { LookupFunction } from 'node:net';
import { networkInterfaces } from 'node:os';
import { ALWAYS_DENIED, canonicalIp, formatIp, parseCidr, parseIp, type DeniedRange, type IpAddress } from './addresses.js';
import { decideAddresses, decideName, type EgressDecision, type Via } from './decide.js';
import type { Target } from './names.js';
import type { EgressPolicy } from './policy.js';

/*
 * From a target to the addresses the proxy may connect to. A name is resolved by the proxy itself
 * (the policy's `hosts:` first, then the system resolver, every address), every address is
 * checked, and the connection later goes to one of exactly these addresses: it is never looked up
 * again, so a name cannot resolve to a checked address for the check and another for the connect.
 */

/** The decision, and when allowed, the checked addresses to connect to (in the resolver's order). */
export type Resolved = { decision: EgressDecision; addresses: readonly IpAddress[] };

export type Lookup = (name: string) => Promise<readonly IpAddress[]>;

/** Resolves a name to its addresses as text (the system resolver, or one the caller supplies). */
export type Resolver = (name: string) => Promise<readonly string[]>;

/** The system resolver (getaddrinfo, as the host's programs see names): every address. */
export const systemResolver: Resolver = async (name) => (await lookup(name, { all: true, verbatim: true })).map((a) => a.address);

/**
 * `resolve` bounded to `timeoutMs`, its answers canonical. An answer that is not an address
 * fails the lookup rather than being skipped: a resolver that returns garbage is not trusted.
 */
export function boundedLookup(resolve: Resolver, timeoutMs: number): Lookup {
  return async (name) => {
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(Object.assign(new Error(`looking up ${name} took over ${timeoutMs} ms`), { code: 'ETIMEOUT' })), timeoutMs);
    });
    try {
      const found = await Promise.race([resolve(name), timeout]);
      return found.map((text) => {
        const ip = parseIp(text);
        if (ip === undefined) throw Object.assign(new Error(`the resolver answered "${text}" for ${name}, not an address`), { code: 'EBADRESP' });
        return canonicalIp(ip);
      });
    } finally {
      clearTimeout(timer);
    }
  };
}

/**
 * Decides `target` on `port`: refused without a lookup when no rule could allow it, else looked
 * up and every address checked against `denied`.
 *
 * @throws the lookup's error (no such name, a timeout): the caller answers 502 or 504.
 */
export async function resolveTarget(
  policy: EgressPolicy, target: Target, port: number, via: Via, denied: readonly DeniedRange[], lookupName: Lookup,
): Promise<Resolved> {
  const stage = decideName(policy, target, port, via);
  if ('refused' in stage) return { decision: stage.refused, addresses: [] };
  const addresses = target.kind === 'ip' ? [target.ip] : policy.hosts.get(target.name) ?? await lookupName(target.name);
  const decision = decideAddresses(policy, stage, addresses, denied);
  return { decision, addresses: decision.allowed ? addresses : [] };
}

/** One range the caller adds to the always-denied ones (berth's sandbox networks, its own ports' addresses). */
export interface ExtraDenied {
  cidr: string;
  /** How refusals name it: `berth sandbox network`. */
  label: string;
}

/**
 * The always-denied ranges plus every address of this host (read now from its interfaces) and
 * the caller's extra ranges.
 *
 * @throws Error for an extra range that does not parse (a caller's bug, caught at start-up).
 */
export function deniedRanges(extra: readonly ExtraDenied[] = []): DeniedRange[] {
  const own: DeniedRange[] = [];
  for (const list of Object.values(networkInterfaces())) {
    for (const a of list ?? []) {
      const ip = parseIp(a.address.split('%')[0]!);
      if (ip === undefined) continue;
      const c = canonicalIp(ip);
      own.push({ range: { family: c.family, base: c.value, prefix: c.family === 4 ? 32 : 128 }, label: 'host address' });
    }
  }
  const added = extra.map((e) => {
    const r = parseCidr(e.cidr);
    if (typeof r === 'string') throw new Error(`egress: extra denied range ${e.cidr}: ${r}`);
    return { range: r, label: e.label };
  });
  return [...ALWAYS_DENIED, ...own, ...added];
}


/**
 * A socket `lookup` that answers with the checked addresses only, whatever name it is asked
 * for: how a connection made by name (for TLS, whose certificate names the host) goes to a
 * checked address.
 */
export function pinnedLookup(addresses: readonly IpAddress[]): LookupFunction {
  const list = addresses.map((a) => ({ address: formatIp(a), family: a.family }));
  return ((_host: string, options: { all?: boolean }, cb: (...args: unknown[]) => void) => {
    if (list.length === 0) cb(Object.assign(new Error('no checked address'), { code: 'ENOTFOUND' }));
    else if (options.all === true) cb(null, list);
    else cb(null, list[0]!.address, list[0]!.family);
  }) as unknown as LookupFunction;
}
