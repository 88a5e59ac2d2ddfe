import { domainToASCII } from 'node:url';
import { canonicalIp, parseIp, type IpAddress } from './addresses.js';

/*
 * Host names as the policy and the proxy compare them: lower case, no trailing dot, ASCII only
 * (internationalised names as their IDNA A-labels, `xn--...`). A target is either a name or an
 * IP literal, never something in between: `127.1`, `0x7f.0.0.1` and `2130706433` are IPv4
 * literals to the resolver, so they are treated as IP targets, never looked up as names.
 */

/** Letters, digits, inner hyphens; `_` too, which real host names (service records, some internal hosts) carry. */
const LABEL_RE = /^(?!-)[a-z0-9_-]{1,63}(?<!-)$/;
const MAX_NAME_CHARS = 253;

/** A target as the proxy sees it: a normalised name or a canonical address. */
export type Target = { kind: 'name'; name: string } | { kind: 'ip'; ip: IpAddress; text: string };

/**
 * `name` in its compared form, or a message naming what is wrong with it and the fix.
 *
 * @example
 * normalizeName('API.GitHub.com.') // 'api.github.com'
 * normalizeName('bücher.de')       // message: write it as its A-label, "xn--bcher-kva.de"
 */
export function normalizeName(name: string): { name: string } | { problem: string } {
  const lower = name.toLowerCase();
  const bare = lower.endsWith('.') ? lower.slice(0, -1) : lower;
  if (bare === '') return { problem: 'is empty' };
  // eslint-disable-next-line no-control-regex
  if (/[^\x00-\x7f]/.test(bare)) {
    const ascii = domainToASCII(bare);
    return { problem: ascii === '' ? 'is not a valid host name' : `is not ASCII; write it as its IDNA A-label "${ascii}"` };
  }
  if (parseIp(bare.replace(/^\[(.*)\]$/, '$1')) !== undefined || looksNumeric(bare)) {
    return { problem: 'is an IP address, not a name; use a `cidr:` entry for addresses' };
  }
  if (bare.length > MAX_NAME_CHARS) return { problem: `is longer than ${MAX_NAME_CHARS} characters` };
  const labels = bare.split('.');
  const bad = labels.find((l) => !LABEL_RE.test(l));
  if (bad !== undefined) {
    return { problem: bad === '' ? 'has an empty label' : `has an invalid label "${bad}" (letters, digits, "_" and inner hyphens only)` };
  }
  return { name: bare };
}

/**
 * Whether the last label is a number (`127.1`, `0x7f.1`, `2130706433`): URL parsers and the
 * system resolver read such a host as an IPv4 address (the WHATWG "ends in a number" rule).
 */
function looksNumeric(host: string): boolean {
  const last = host.split('.').filter((l) => l !== '').pop() ?? '';
  return /^(\d+|0x[0-9a-f]*)$/.test(last);
}

/**
 * What a CONNECT authority or a URL host names: an IP literal (bracketed IPv6 allowed, numeric
 * IPv4 shorthands read as the resolver would), or a name; undefined when it is neither.
 */
export function parseTarget(host: string): Target | undefined {
  const unbracketed = host.startsWith('[') && host.endsWith(']') ? host.slice(1, -1) : host;
  const literal = parseIp(unbracketed);
  if (literal !== undefined) return { kind: 'ip', ip: canonicalIp(literal), text: unbracketed.toLowerCase() };
  if (unbracketed !== host) return undefined;
  if (looksNumeric(host.toLowerCase())) {
    const ip = numericIpv4(host);
    return ip === undefined ? undefined : { kind: 'ip', ip, text: host.toLowerCase() };
  }
  const n = normalizeName(host);
  return 'name' in n ? { kind: 'name', name: n.name } : undefined;
}

/** An IPv4 shorthand as the WHATWG URL parser (and inet_aton) reads it, or undefined. */
function numericIpv4(host: string): IpAddress | undefined {
  try {
    const parsed = new URL(`http://${host}/`).hostname;
    const ip = parseIp(parsed);
    return ip?.family === 4 ? ip : undefined;
  } catch {
    return undefined;
  }
}

/**
 * `host:port` split: `api.github.com:443`, `[::1]:8080`. The port must be 1..65535.
 * Undefined when the text is not that shape.
 */
export function splitHostPort(text: string): { host: string; port: number } | undefined {
  const m = /^(\[[^\]]+\]|[^:[\]]+):(\d{1,5})$/.exec(text);
  if (m === null) return undefined;
  const port = Number(m[2]);
  if (port < 1 || port > 65535) return undefined;
  return { host: m[1]!, port };
}
