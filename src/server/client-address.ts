import { isIPv6 } from 'node:net';

/**
 * The client a connection is counted against for `server.maxConnectionsPerAddress`: its IPv4
 * address (also when it arrives IPv4-mapped, `::ffff:1.2.3.4`), or the /64 of its IPv6 address,
 * since one IPv6 client usually holds a whole /64 and could otherwise take a new address per
 * connection. `undefined` (a socket already gone) is its own key.
 *
 * @example
 * clientKey('::ffff:127.0.0.1'); // '127.0.0.1'
 * clientKey('2001:db8:1:2:aaaa::1'); // '2001:db8:1:2::/64'
 */
export function clientKey(address: string | undefined): string {
  if (address === undefined) return '';
  const zoneless = address.replace(/%.*$/, '');
  if (!isIPv6(zoneless)) return zoneless;
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(zoneless);
  if (mapped !== null) return mapped[1] as string;
  return `${expandIPv6(zoneless).slice(0, 4).join(':')}::/64`;
}

/** The eight groups of an IPv6 address, each without leading zeros (an embedded IPv4 tail as two groups). */
function expandIPv6(address: string): string[] {
  const v4 = /(\d+)\.(\d+)\.(\d+)\.(\d+)$/.exec(address);
  let text = address;
  if (v4 !== null) {
    const [a, b, c, d] = v4.slice(1).map(Number) as [number, number, number, number];
    text = `${address.slice(0, v4.index)}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
  }
  const [head = '', tail] = text.split('::');
  const left = head === '' ? [] : head.split(':');
  const right = tail === undefined || tail === '' ? [] : tail.split(':');
  const zeros = tail === undefined ? [] : new Array<string>(8 - left.length - right.length).fill('0');
  return [...left, ...zeros, ...right].map((g) => parseInt(g, 16).toString(16));
}
