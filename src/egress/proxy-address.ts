import { formatIp, parseIp } from './addresses.js';
import { splitHostPort } from './names.js';

/*
 * The shared listener's addresses (`egressProxy.listen`, `egressProxy.advertise`): an IP literal
 * and a port, never a name. A sandbox in allowlist mode has no DNS, and its NetworkPolicy admits
 * one address: the one it is told.
 */

export interface ProxyAddress {
  /** The IP as written in a URL's authority (`10.0.0.5`, `[fd00::5]`). */
  authority: string;
  /** The IP alone (`10.0.0.5`, `fd00::5`). */
  ip: string;
  family: 4 | 6;
  port: number;
}

/**
 * `10.0.0.5:3128` or `[fd00::5]:3128`; a message naming the fix otherwise.
 *
 * @example
 * parseProxyAddress('10.0.0.5:3128') // { authority: '10.0.0.5:3128', ip: '10.0.0.5', family: 4, port: 3128 }
 */
export function parseProxyAddress(text: string): ProxyAddress | string {
  const hp = splitHostPort(text);
  const bare = hp?.host.startsWith('[') === true ? hp.host.slice(1, -1) : hp?.host;
  const ip = bare === undefined ? undefined : parseIp(bare);
  if (hp === undefined || ip === undefined || (ip.family === 6) !== hp.host.startsWith('[')) {
    return `must be an IP address and a port, e.g. "10.0.0.5:3128" or "[fd00::5]:3128" (a name would need DNS, which a sandbox in allowlist mode does not have)`;
  }
  const formatted = formatIp(ip);
  return { authority: ip.family === 6 ? `[${formatted}]:${hp.port}` : `${formatted}:${hp.port}`, ip: formatted, family: ip.family, port: hp.port };
}
