import { createHmac, timingSafeEqual } from 'node:crypto';

/*
 * The proxy credential of a sandbox berth cannot give a listener of its own (a pod on a cluster):
 * such a sandbox reaches one shared listener, and says which sandbox it is by the user and
 * password in its proxy URL (`http://<user>:<token>@host:port`, sent as Proxy-Authorization).
 * The user names the sandbox (its identity digest, no secret); the token is an HMAC of it under
 * the installation's placeholder secret, so a restarted berth recognises the processes that kept
 * it in their environment, and a sandbox that knows its own token cannot derive another's.
 */

/** 128 bits of the HMAC as hex, like a placeholder. */
const TOKEN_HEX = 32;
/** The digest's first 128 bits name the sandbox (`s` keeps the user from starting with a digit). */
const USER_HEX = 32;

export interface ProxyCredential {
  user: string;
  token: string;
}

/**
 * @example
 * proxyCredential(secret, identityDigest(id)) // { user: 's3f9a...', token: '8c1e...' }
 */
export function proxyCredential(secret: Buffer, sandboxDigest: string): ProxyCredential {
  const token = createHmac('sha256', secret).update(`proxy\0${sandboxDigest}`, 'utf8').digest('hex').slice(0, TOKEN_HEX);
  return { user: `s${sandboxDigest.slice(0, USER_HEX)}`, token };
}

/** The proxy URL a sandbox is given: its credential and the address it reaches the shared listener at. */
export function proxyUrl(credential: ProxyCredential, address: string): string {
  return `http://${credential.user}:${credential.token}@${address}`;
}

/** The user and password of a `Proxy-Authorization: Basic ...` header, or undefined for any other shape. */
export function parseProxyAuthorization(header: string | undefined): { user: string; password: string } | undefined {
  const m = /^basic +([A-Za-z0-9+/]+=*) *$/i.exec(header ?? '');
  if (m === null) return undefined;
  const text = Buffer.from(m[1]!, 'base64').toString('utf8');
  const colon = text.indexOf(':');
  return colon < 0 ? undefined : { user: text.slice(0, colon), password: text.slice(colon + 1) };
}

/** Whether `password` is `token`, in time that does not depend on where they differ. */
export function tokenMatches(password: string, token: string): boolean {
  const a = Buffer.from(password, 'utf8');
  const b = Buffer.from(token, 'utf8');
  return a.length === b.length && timingSafeEqual(a, b);
}
