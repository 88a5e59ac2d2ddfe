import { isIP } from 'node:net';

/*
 * IP addresses as numbers, CIDR ranges, and the address classes the egress proxy always refuses.
 * Every address is reduced to one canonical form before it is checked: an IPv6 address that
 * carries an IPv4 one (mapped `::ffff:a.b.c.d`, compatible `::a.b.c.d`, NAT64 `64:ff9b::/96`) is
 * checked as that IPv4 address, so `::ffff:127.0.0.1` is loopback like `127.0.0.1`.
 */

export type IpFamily = 4 | 6;

/** One address: its family and its value (32 or 128 bits). */
export interface IpAddress {
  family: IpFamily;
  value: bigint;
}

/** A range: the base address with the host bits cleared, and the prefix length. */
export interface Cidr {
  family: IpFamily;
  base: bigint;
  prefix: number;
}

const BITS: Record<IpFamily, number> = { 4: 32, 6: 128 };

/** `1.2.3.4` or an IPv6 literal (brackets and a zone are refused) as a number, else undefined. */
export function parseIp(text: string): IpAddress | undefined {
  const family = isIP(text);
  if (family === 4) return { family: 4, value: parseV4(text) };
  if (family === 6 && !text.includes('%')) return { family: 6, value: parseV6(text) };
  return undefined;
}

function parseV4(text: string): bigint {
  return text.split('.').reduce((acc, part) => (acc << 8n) | BigInt(Number(part)), 0n);
}

function parseV6(text: string): bigint {
  let s = text.toLowerCase();
  // A trailing dotted IPv4 part stands for the last two groups.
  const dotted = /(\d+\.\d+\.\d+\.\d+)$/.exec(s);
  if (dotted?.[1] !== undefined) {
    const v4 = parseV4(dotted[1]);
    s = `${s.slice(0, dotted.index)}${(v4 >> 16n).toString(16)}:${(v4 & 0xffffn).toString(16)}`;
  }
  const [head = '', tail] = s.split('::');
  const headGroups = head === '' ? [] : head.split(':');
  const tailGroups = tail === undefined || tail === '' ? [] : tail.split(':');
  const zeros = tail === undefined ? 0 : 8 - headGroups.length - tailGroups.length;
  const groups = [...headGroups, ...Array<string>(zeros).fill('0'), ...tailGroups];
  return groups.reduce((acc, g) => (acc << 16n) | BigInt(parseInt(g, 16)), 0n);
}

const NAT64_PREFIX = 0x0064ff9bn << 96n;
const LOW_32 = 0xffffffffn;

/**
 * The address a connection to `ip` really reaches, for checking: the IPv4 address inside an
 * IPv4-mapped, IPv4-compatible or NAT64 (64:ff9b::/96) IPv6 address, else `ip` itself.
 *
 * @example
 * canonicalIp(parseIp('::ffff:127.0.0.1')!) // { family: 4, value: 0x7f000001n }
 */
export function canonicalIp(ip: IpAddress): IpAddress {
  if (ip.family === 4) return ip;
  const high = ip.value >> 32n;
  // ::/96 other than :: and ::1 (IPv4-compatible, deprecated but still routed by some stacks).
  const compatible = high === 0n && ip.value > 1n;
  if (high === 0xffffn || compatible || high === NAT64_PREFIX >> 32n) return { family: 4, value: ip.value & LOW_32 };
  return ip;
}

/** Text form: dotted quad, or IPv6 with the longest zero run compressed (RFC 5952). */
export function formatIp(ip: IpAddress): string {
  if (ip.family === 4) return [24n, 16n, 8n, 0n].map((s) => String((ip.value >> s) & 0xffn)).join('.');
  if (ip.value >> 32n === 0xffffn) return `::ffff:${formatIp({ family: 4, value: ip.value & LOW_32 })}`;
  const groups = Array.from({ length: 8 }, (_, i) => Number((ip.value >> BigInt(112 - 16 * i)) & 0xffffn));
  let best = -1;
  let bestLen = 1;
  for (let i = 0; i < 8;) {
    let j = i;
    while (j < 8 && groups[j] === 0) j++;
    if (j - i > bestLen) [best, bestLen] = [i, j - i];
    i = j === i ? i + 1 : j;
  }
  const hex = groups.map((g) => g.toString(16));
  if (best < 0) return hex.join(':');
  return `${hex.slice(0, best).join(':')}::${hex.slice(best + bestLen).join(':')}`;
}

/**
 * `10.0.0.0/8`, `fe80::/10`, or a bare address (a /32 or /128). Host bits must be zero, so a
 * typo such as `10.1.2.3/8` is an error instead of a silently wider range.
 *
 * @returns the range, or a message naming what is wrong.
 */
export function parseCidr(text: string): Cidr | string {
  const slash = text.indexOf('/');
  const addrText = slash < 0 ? text : text.slice(0, slash);
  const ip = parseIp(addrText);
  if (ip === undefined) return `"${addrText}" is not an IPv4 or IPv6 address`;
  const bits = BITS[ip.family];
  const prefixText = slash < 0 ? String(bits) : text.slice(slash + 1);
  if (!/^\d{1,3}$/.test(prefixText) || Number(prefixText) > bits) return `prefix "/${prefixText}" is not a number from 0 to ${bits}`;
  const prefix = Number(prefixText);
  const hostMask = (1n << BigInt(bits - prefix)) - 1n;
  if ((ip.value & hostMask) !== 0n) {
    return `${text} has host bits set; write the network address (${formatIp({ ...ip, value: ip.value & ~hostMask })}/${prefix})`;
  }
  return { family: ip.family, base: ip.value, prefix };
}

/** A range for code that knows its text is valid (the built-in tables). */
export function cidr(text: string): Cidr {
  const r = parseCidr(text);
  if (typeof r === 'string') throw new Error(`bad built-in range ${text}: ${r}`);
  return r;
}

export function cidrContains(range: Cidr, ip: IpAddress): boolean {
  if (range.family !== ip.family) return false;
  const shift = BigInt(BITS[range.family] - range.prefix);
  return (ip.value >> shift) === (range.base >> shift);
}

/** Whether every address of `inner` lies in `outer`. */
export function cidrWithin(inner: Cidr, outer: Cidr): boolean {
  return inner.family === outer.family && inner.prefix >= outer.prefix && cidrContains(outer, { family: inner.family, value: inner.base });
}

export function formatCidr(range: Cidr): string {
  return `${formatIp({ family: range.family, value: range.base })}/${range.prefix}`;
}

/** One class of addresses the proxy never connects to, whatever the allowlist says. */
export interface DeniedRange {
  range: Cidr;
  /** The class, as refusals and events name it: `loopback`, `link-local`, `private`, ... */
  label: string;
}

/**
 * The address classes no sandbox reaches through the proxy unless a `cidr:` entry inside one of
 * them names the address (docs/egress.md, "Always denied"). IPv6 forms that carry an IPv4 address
 * are reduced by `canonicalIp` before these are checked, so they need no rows of their own.
 */
export const ALWAYS_DENIED: readonly DeniedRange[] = Object.freeze([
  ['0.0.0.0/8', 'this-network'],
  ['10.0.0.0/8', 'private'],
  ['100.64.0.0/10', 'cgnat'],
  ['127.0.0.0/8', 'loopback'],
  ['169.254.0.0/16', 'link-local'],
  ['172.16.0.0/12', 'private'],
  ['192.0.0.0/24', 'reserved'],
  ['192.168.0.0/16', 'private'],
  ['198.18.0.0/15', 'reserved'],
  ['224.0.0.0/4', 'multicast'],
  ['240.0.0.0/4', 'reserved'],
  ['::/128', 'unspecified'],
  ['::1/128', 'loopback'],
  ['fc00::/7', 'private'],
  ['fe80::/10', 'link-local'],
  ['fec0::/10', 'link-local'],
  ['ff00::/8', 'multicast'],
].map(([text, label]) => Object.freeze({ range: cidr(text!), label: label! })));

/** The metadata address cloud providers serve credentials on; refusals name it for what it is. */
const METADATA = parseIp('169.254.169.254')!;

/** The class label for `ip` (already canonical) in `ranges`, or undefined. */
export function deniedClass(ip: IpAddress, ranges: readonly DeniedRange[]): DeniedRange | undefined {
  for (const r of ranges) if (cidrContains(r.range, ip)) return r;
  return undefined;
}

/** `metadata` for the cloud metadata address, else the class label. */
export function classLabel(ip: IpAddress, denied: DeniedRange): string {
  return ip.family === METADATA.family && ip.value === METADATA.value ? 'metadata (link-local)' : denied.label;
}
