import { hostInList, type EgressCredential } from './credentials.js';
import { PLACEHOLDER_PREFIX } from './placeholders.js';

/*
 * What the proxy does to the head of a request on its way out: placeholders become values for
 * the credential's own hosts (also inside `Authorization: Basic`, so git's
 * `https://x-access-token:$TOKEN@host/` works), configured headers are injected, hop-by-hop
 * headers go. A placeholder on its way to any other host stops the request: the value never
 * goes anywhere but its hosts, and the attempt is reported as exfiltration.
 */

/** Headers that belong to one hop (RFC 9110 §7.6.1), plus the proxy's own. */
const HOP_BY_HOP = new Set(['connection', 'proxy-connection', 'keep-alive', 'proxy-authorization', 'proxy-authenticate', 'te', 'trailer', 'transfer-encoding', 'upgrade']);

export type HeaderRewrite =
  /** `headers`: name (as sent) -> value(s). `credentials`: names swapped in or injected, sorted. */
  | { ok: true; headers: Record<string, string | string[]>; credentials: string[] }
  /** A placeholder of `credential` was on its way to a host that is not one of its hosts. */
  | { ok: false; credential: string };

/**
 * The credential whose placeholder `text` carries and that may not go to `host`, if any.
 * For the parts of a request that are never rewritten: a CONNECT target, a request line.
 */
export function strayPlaceholder(text: string, host: string, credentials: readonly EgressCredential[]): EgressCredential | undefined {
  if (!text.includes(PLACEHOLDER_PREFIX)) return undefined;
  return credentials.find((c) => text.includes(c.placeholder) && !hostInList(host, c.hosts));
}

/**
 * Rewrites a request head (`rawHeaders` as node:http gives it) bound for `host`.
 *
 * @example
 * rewriteHeaders(['Authorization', 'Bearer berth-ph-1f..'], 'api.github.com', [gh])
 * // { ok: true, headers: { Authorization: 'Bearer ghp_real' }, credentials: ['GITHUB_TOKEN'] }
 */
export function rewriteHeaders(rawHeaders: readonly string[], host: string, credentials: readonly EgressCredential[]): HeaderRewrite {
  const headers: Record<string, string | string[]> = {};
  const used = new Set<string>();
  const own = credentials.filter((c) => hostInList(host, c.hosts));
  const dropped = connectionTokens(rawHeaders);
  const injected = new Set(own.filter((c) => c.inject !== undefined).map((c) => c.inject!.header.toLowerCase()));
  for (let i = 0; i + 1 < rawHeaders.length; i += 2) {
    const name = rawHeaders[i]!;
    const lower = name.toLowerCase();
    if (HOP_BY_HOP.has(lower) || dropped.has(lower) || injected.has(lower)) continue;
    const value = swapIn(rawHeaders[i + 1]!, lower, host, credentials, used);
    if (typeof value !== 'string') return { ok: false, credential: value.stray };
    const prev = headers[name];
    headers[name] = prev === undefined ? value : [...(Array.isArray(prev) ? prev : [prev]), value];
  }
  for (const c of own) {
    if (c.inject === undefined) continue;
    headers[c.inject.header] = c.inject.value.replaceAll('{value}', c.value);
    used.add(c.name);
  }
  return { ok: true, headers, credentials: [...used].sort() };
}

/** `value` with every placeholder swapped for its value, or the credential that may not go to `host`. */
function swapIn(value: string, lowerName: string, host: string, credentials: readonly EgressCredential[], used: Set<string>): string | { stray: string } {
  if (lowerName === 'authorization') {
    const basic = /^(basic)( +)([A-Za-z0-9+/=]+)$/i.exec(value);
    if (basic !== null) {
      const decoded = Buffer.from(basic[3]!, 'base64').toString('utf8');
      if (decoded.includes(PLACEHOLDER_PREFIX)) {
        const swapped = swapText(decoded, host, credentials, used);
        if (typeof swapped !== 'string') return swapped;
        return `${basic[1]}${basic[2]}${Buffer.from(swapped, 'utf8').toString('base64')}`;
      }
    }
  }
  return swapText(value, host, credentials, used);
}

function swapText(text: string, host: string, credentials: readonly EgressCredential[], used: Set<string>): string | { stray: string } {
  if (!text.includes(PLACEHOLDER_PREFIX)) return text;
  let out = text;
  for (const c of credentials) {
    if (!out.includes(c.placeholder)) continue;
    if (!hostInList(host, c.hosts)) return { stray: c.name };
    out = out.replaceAll(c.placeholder, c.value);
    used.add(c.name);
  }
  return out;
}

/** Header names the request's `Connection` header lists: they belong to this hop too. */
function connectionTokens(rawHeaders: readonly string[]): Set<string> {
  const out = new Set<string>();
  for (let i = 0; i + 1 < rawHeaders.length; i += 2) {
    if (rawHeaders[i]!.toLowerCase() !== 'connection') continue;
    for (const t of rawHeaders[i + 1]!.split(',')) out.add(t.trim().toLowerCase());
  }
  return out;
}
