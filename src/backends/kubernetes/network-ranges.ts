import { ALWAYS_DENIED, formatCidr, parseCidr, type Cidr } from '../../egress/addresses.js';

/*
 * The address ranges of the tenant NetworkPolicy (`network: egress`), and the checks of the
 * settings that name addresses. The blocked ranges are the egress proxy's: one definition of
 * where a sandbox never goes (private, shared, loopback, link-local with the cloud metadata
 * servers, 169.254.169.254 and AWS's fd00:ec2::254 or GCP's fd20:ce::254 among them), in both
 * families.
 */

/** RFC 6052's well-known NAT64 prefix: `64:ff9b::a.b.c.d` reaches IPv4 `a.b.c.d` through a NAT64 gateway. */
const NAT64_WELL_KNOWN = 0x0064ff9bn << 96n;

/**
 * RFC 8215's NAT64 prefix for local use: which IPv4 addresses it maps to is the network's own
 * choice, so the whole prefix is blocked.
 */
const NAT64_LOCAL_USE = '64:ff9b:1::/48';

/** The NAT64 form of an IPv4 range: the same addresses, reached over IPv6 through the gateway. */
function nat64Of(range: Cidr): Cidr {
  return { family: 6, base: NAT64_WELL_KNOWN | range.base, prefix: 96 + range.prefix };
}

const denied = (family: 4 | 6): Cidr[] => ALWAYS_DENIED.map((d) => d.range).filter((r) => r.family === family);

/**
 * IPv4 ranges a sandbox never reaches with `network: egress`; an IPv4-mapped IPv6 address
 * (`::ffff:a.b.c.d`) leaves the pod as IPv4, so these cover it too.
 */
export const BLOCKED_V4: readonly string[] = Object.freeze(denied(4).map(formatCidr));

/** The IPv6 ones: IPv6's own private, loopback and link-local ranges, and the NAT64 forms of the IPv4 ones. */
export const BLOCKED_V6: readonly string[] = Object.freeze([...denied(6).map(formatCidr), ...denied(4).map((r) => formatCidr(nat64Of(r))), NAT64_LOCAL_USE]);

/** A written range in the form the API server stores and berth compares (`FD00::/8` is `fd00::/8`). */
export function canonicalCidr(text: string): Cidr {
  const range = parseCidr(text);
  if (typeof range === 'string') throw new RangeError(`bad range ${text}: ${range}`);
  return range;
}

/** The IPv4-mapped block (`::ffff:0:0/96`): the API server's strict IP validation refuses addresses in it. */
function mapped(range: Cidr): boolean {
  return range.family === 6 && range.base >> 32n === 0xffffn;
}

/** What is wrong with a `dnsAddresses` entry, or undefined: one IPv4 or IPv6 address. */
export function dnsAddressProblem(text: string): string | undefined {
  if (text.includes('/')) return `"${text}" is a range; write one address (the DNS cache's or the DNS Service's)`;
  const range = parseCidr(text);
  if (typeof range === 'string') return range;
  if (mapped(range)) return `"${text}" is an IPv4-mapped IPv6 address, which the API server refuses; write the IPv4 address`;
  return undefined;
}

/** What is wrong with a `blockedCidrs` entry, or undefined: a range with its host bits clear, narrower than everything. */
export function blockedCidrProblem(text: string): string | undefined {
  const range = parseCidr(text);
  if (typeof range === 'string') return range;
  if (range.prefix === 0) return `"${text}" would block every address; use network: none to cut sandboxes off`;
  if (mapped(range)) return `"${text}" is in the IPv4-mapped block, which the API server refuses; write the IPv4 range`;
  return undefined;
}
