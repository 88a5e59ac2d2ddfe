import { parseTarget } from './names.js';

/**
 * Whether a Host header (or URL authority) names `host` on `port`: the same name or address
 * (normalised: case, trailing dot, IPv6 forms) and the same port, an absent port meaning
 * `defaultPort`. An absent header matches nothing.
 *
 * @example
 * hostHeaderMatches('API.github.com:443', 'api.github.com', 443, 443) // true
 * hostHeaderMatches('evil.example', 'api.github.com', 443, 443)       // false
 */
export function hostHeaderMatches(header: string | undefined, host: string, port: number, defaultPort: number): boolean {
  if (header === undefined) return false;
  const m = /^(\[[^\]]*\]|[^:]*)(?::(\d{1,5}))?$/.exec(header.trim());
  if (m === null) return false;
  if ((m[2] === undefined ? defaultPort : Number(m[2])) !== port) return false;
  const a = parseTarget(m[1]!);
  const b = parseTarget(host);
  if (a === undefined || b === undefined) return false;
  if (a.kind === 'name' && b.kind === 'name') return a.name === b.name;
  if (a.kind === 'ip' && b.kind === 'ip') return a.ip.family === b.ip.family && a.ip.value === b.ip.value;
  return false;
}
