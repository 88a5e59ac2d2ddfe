import { ALWAYS_DENIED, cidrContains, cidrWithin, classLabel, deniedClass, formatIp, type DeniedRange, type IpAddress } from './addresses.js';
import { parseTarget, type Target } from './names.js';
import { cidrAdmitsPort, nameEntryMatches, type EgressEntry, type EgressPolicy } from './policy.js';

/*
 * The egress decision, pure: (target, port, how it is asked for, the addresses it resolved to)
 * -> allowed or refused, and the rule that decided. It runs in two stages so that a name no rule
 * allows is never looked up (a lookup alone carries data out, in the name asked for):
 * `decideName` before any lookup, `decideAddresses` on what the lookup returned.
 */

/** How the sandbox asked: a CONNECT tunnel, or an absolute-URI plain HTTP request. */
export type Via = 'connect' | 'http';

/**
 * How allowed traffic is carried: `tls` a CONNECT tunnel whose ClientHello must name the target
 * (and which the proxy may intercept for a credential host), `raw` a TCP tunnel it does not
 * inspect, `http` a plain HTTP request it forwards.
 */
export type Carry = 'tls' | 'raw' | 'http';

export interface EgressDecision {
  allowed: boolean;
  /**
   * What decided: an entry (`allow api.github.com`, `allow host:db.internal:5432`,
   * `deny cidr:10.0.0.0/8`), the mode (`mode open`, `mode none`), `not in egress.allow`, or an
   * always-denied class (`always denied: loopback`). The proxy adds `fronting`, `host mismatch`
   * and `exfiltration` for what it finds in the traffic itself.
   */
  rule: string;
  /** What the refusal is about, for its message (the address, the ports an entry allows). */
  detail?: string;
  /** Set when allowed. */
  carry?: Carry;
}

/** After `decideName`: refused outright, or look the name up and call `decideAddresses`. */
export type NameStage =
  | { refused: EgressDecision }
  | { lookup: true; allowedBy: string | undefined; carry: Carry; port: number };

const NOT_ALLOWED = 'not in egress.allow';
const NAME_PORTS: Record<Via, number> = { connect: 443, http: 80 };

/**
 * The first stage, before any lookup. For an IP target the lookup is the address itself.
 *
 * @example
 * decideName(policy, parseTarget('api.github.com')!, 443, 'connect')
 * // { lookup: true, allowedBy: 'allow api.github.com', carry: 'tls' }
 */
export function decideName(policy: EgressPolicy, target: Target, port: number, via: Via): NameStage {
  if (policy.mode === 'none') return { refused: { allowed: false, rule: 'mode none' } };
  if (target.kind === 'ip') {
    const carry: Carry = via === 'http' ? 'http' : 'raw';
    if (policy.mode === 'open') return { lookup: true, allowedBy: 'mode open', carry, port };
    if (!policy.allow.some((e) => e.kind === 'cidr')) {
      return { refused: { allowed: false, rule: NOT_ALLOWED, detail: 'an IP address is reached only through a cidr: entry' } };
    }
    return { lookup: true, allowedBy: undefined, carry, port };
  }
  const name = target.name;
  const denied = policy.deny.find((e) => nameEntryMatches(e, name, port));
  if (denied !== undefined) return { refused: { allowed: false, rule: `deny ${denied.text}` } };
  if (policy.mode === 'open') {
    return { lookup: true, allowedBy: 'mode open', carry: via === 'http' ? 'http' : port === 443 ? 'tls' : 'raw', port };
  }
  if (via === 'connect') {
    const host = policy.allow.find((e) => e.kind === 'host' && e.name === name && e.port === port);
    if (host !== undefined) return { lookup: true, allowedBy: `allow ${host.text}`, carry: 'raw', port };
  }
  const byName = policy.allow.find((e) => (e.kind === 'name' || e.kind === 'wildcard') && nameEntryMatches(e, name, port));
  if (byName !== undefined && port === NAME_PORTS[via]) {
    return { lookup: true, allowedBy: `allow ${byName.text}`, carry: via === 'http' ? 'http' : 'tls', port };
  }
  // A cidr: range is reached by a name the policy knows (egress.hosts, or a name or wildcard entry
  // on another port), never by a lookup of any other: a resolver asked about any name would carry
  // `<secret>.attacker.example` out in the question.
  if (policy.allow.some((e) => e.kind === 'cidr')) {
    if (policy.hosts.has(name) || byName !== undefined) return { lookup: true, allowedBy: undefined, carry: via === 'http' ? 'http' : 'raw', port };
    return {
      refused: {
        allowed: false, rule: NOT_ALLOWED,
        detail: `a name reaches a cidr: range only when the policy names it (berth asks no resolver about any other name); add ${name} to egress.hosts, or allow it by name`,
      },
    };
  }
  if (byName !== undefined) {
    const detail = `${byName.text} is allowed on port 443 through CONNECT (HTTPS) and port 80 as plain HTTP; a raw tunnel to another port needs { host: "${name}:${port}" }`;
    return { refused: { allowed: false, rule: NOT_ALLOWED, detail } };
  }
  return { refused: { allowed: false, rule: NOT_ALLOWED } };
}

/**
 * The second stage: every address the target resolved to is checked (deny ranges, then the
 * always-denied classes, which only a `cidr:` allow entry lying inside the class lifts), and a
 * target that no name rule allowed needs every address inside an allowed range.
 *
 * @param denied the always-denied classes, the host's own addresses and the caller's extra ranges.
 */
export function decideAddresses(
  policy: EgressPolicy,
  stage: Extract<NameStage, { lookup: true }>,
  addresses: readonly IpAddress[],
  denied: readonly DeniedRange[] = ALWAYS_DENIED,
): EgressDecision {
  if (addresses.length === 0) return { allowed: false, rule: NOT_ALLOWED, detail: 'the name has no address' };
  const allowRanges = policy.allow.filter((e): e is Extract<EgressEntry, { kind: 'cidr' }> => e.kind === 'cidr');
  let byRange: string | undefined;
  for (const ip of addresses) {
    const deny = policy.deny.find((e) => e.kind === 'cidr' && cidrContains(e.range, ip));
    if (deny !== undefined) return { allowed: false, rule: `deny ${deny.text}`, detail: formatIp(ip) };
    // A range with ports admits (and lifts a class for) those ports only. Of the ranges that admit
    // the address, one inside its class is preferred: `cidr: 0.0.0.0/0` listed first must not hide
    // a `cidr: 10.20.1.5/32` that names a private address.
    const cls = deniedClass(ip, denied);
    const admitting = allowRanges.filter((e) => cidrContains(e.range, ip) && cidrAdmitsPort(e, stage.port));
    const inRange = (cls === undefined ? undefined : admitting.find((e) => cidrWithin(e.range, cls.range))) ?? admitting[0];
    const otherPorts = (): string | undefined => {
      const r = allowRanges.find((e) => cidrContains(e.range, ip));
      return r === undefined ? undefined : `${formatIp(ip)} is in ${r.text}, which allows port${r.ports!.length > 1 ? 's' : ''} ${r.ports!.join(', ')} only`;
    };
    // A range lifts a class only when the operator named something inside it: `cidr: 0.0.0.0/0`
    // opens the public internet, not loopback or the metadata address.
    if (cls !== undefined && (inRange === undefined || !cidrWithin(inRange.range, cls.range))) {
      return { allowed: false, rule: `always denied: ${classLabel(ip, cls)}`, detail: inRange === undefined ? otherPorts() ?? formatIp(ip) : formatIp(ip) };
    }
    if (stage.allowedBy === undefined) {
      if (inRange === undefined) return { allowed: false, rule: NOT_ALLOWED, detail: otherPorts() ?? `${formatIp(ip)} is in no cidr: entry` };
      byRange ??= `allow ${inRange.text}`;
    }
  }
  return { allowed: true, rule: stage.allowedBy ?? byRange!, carry: stage.carry };
}

/**
 * Both stages at once, for callers that already hold the addresses (tests, `explain`).
 * `host` is a name or an IP literal; a name's `addresses` are what it resolves to.
 */
export function decide(
  policy: EgressPolicy,
  request: { host: string; port: number; via: Via; addresses?: readonly IpAddress[] },
  denied: readonly DeniedRange[] = ALWAYS_DENIED,
): EgressDecision {
  const target = parseTarget(request.host);
  if (target === undefined) return { allowed: false, rule: NOT_ALLOWED, detail: `"${request.host}" is neither a host name nor an IP address` };
  const stage = decideName(policy, target, request.port, request.via);
  if ('refused' in stage) return stage.refused;
  const addresses = target.kind === 'ip' ? [target.ip] : request.addresses ?? policy.hosts.get(target.name) ?? [];
  return decideAddresses(policy, stage, addresses, denied);
}
