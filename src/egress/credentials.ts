import { ConfigError } from '../errors.js';
import { decideName } from './decide.js';
import { parseTarget } from './names.js';
import { parseNamePattern, type EgressIssue, type EgressPolicy } from './policy.js';

/*
 * Secretless credentials: the sandbox's environment holds a placeholder, and the proxy puts the
 * real value into requests to the credential's own hosts only (docs/egress.md, "Credentials").
 * This file parses a profile's `credentials:` section and checks it against its egress policy.
 */

/** `inject`: the proxy sets this header itself (`value` with `{value}` replaced by the secret). */
export interface HeaderInjection {
  header: string;
  value: string;
}

/** One `credentials:` entry as configured: where the value comes from, where it may go. */
export interface CredentialSpec {
  /** The variable the sandbox sees (holding the placeholder). */
  name: string;
  /** Where the caller reads the real value (a name in berth's environment or secrets file). */
  from: string;
  /** Names (`api.github.com`) and wildcards (`*.example.com`) the value may go to, normalised. */
  hosts: readonly string[];
  inject?: HeaderInjection;
}

/** A credential as the proxy holds it for one sandbox: the spec with its value and placeholder. */
export interface EgressCredential {
  name: string;
  value: string;
  placeholder: string;
  hosts: readonly string[];
  inject?: HeaderInjection;
}

const ENV_NAME_RE = /^[A-Za-z_][A-Za-z0-9_]*$/;
const HEADER_NAME_RE = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
/** Headers the proxy itself writes or strips: injecting one would break the request or the hop. */
const RESERVED_HEADERS = new Set(['host', 'connection', 'content-length', 'transfer-encoding', 'te', 'upgrade', 'keep-alive', 'proxy-authorization', 'proxy-connection', 'trailer']);
const SPEC_KEYS = new Set(['from', 'hosts', 'inject']);

/**
 * Validates a profile's `credentials:` section against its `egress:` policy: each host must be
 * one the policy lets through over HTTPS by name, since that is the only way the value goes out.
 *
 * @example
 * checkCredentials({ GITHUB_TOKEN: { from: 'GITHUB_TOKEN', hosts: ['api.github.com'] } }, policy)
 * // { ok: true, specs: [{ name: 'GITHUB_TOKEN', from: 'GITHUB_TOKEN', hosts: ['api.github.com'] }] }
 */
export function checkCredentials(raw: unknown, policy: EgressPolicy, path = 'credentials'):
{ ok: true; specs: CredentialSpec[] } | { ok: false; issues: EgressIssue[] } {
  const issues: EgressIssue[] = [];
  const specs: CredentialSpec[] = [];
  if (raw === undefined || raw === null) return { ok: true, specs };
  if (typeof raw !== 'object' || Array.isArray(raw)) return { ok: false, issues: [{ path, message: 'must map variable names to { from, hosts }' }] };
  for (const [name, value] of Object.entries(raw as Record<string, unknown>)) {
    const at = `${path}.${name}`;
    const before = issues.length;
    if (!ENV_NAME_RE.test(name)) issues.push({ path: at, message: 'is not a variable name (letters, digits and _, not starting with a digit)' });
    if (typeof value !== 'object' || value === null || Array.isArray(value)) {
      issues.push({ path: at, message: 'must be { from: VARIABLE, hosts: [names] }' });
      continue;
    }
    const v = value as Record<string, unknown>;
    for (const key of Object.keys(v)) if (!SPEC_KEYS.has(key)) issues.push({ path: `${at}.${key}`, message: 'is not a setting; the keys are from, hosts and inject' });
    const from = v['from'] ?? name;
    if (v['from'] !== undefined && (typeof from !== 'string' || !ENV_NAME_RE.test(from))) issues.push({ path: `${at}.from`, message: 'must name a variable of berth\'s environment' });
    const hosts = checkHosts(v['hosts'], `${at}.hosts`, policy, issues);
    const inject = checkInjection(v['inject'], `${at}.inject`, issues);
    if (issues.length === before) specs.push({ name, from: from as string, hosts, ...(inject === undefined ? {} : { inject }) });
  }
  return issues.length > 0 ? { ok: false, issues } : { ok: true, specs };
}

/** `checkCredentials` that throws a `ConfigError` listing every issue, one per line. */
export function parseCredentials(raw: unknown, policy: EgressPolicy, path = 'credentials'): CredentialSpec[] {
  const r = checkCredentials(raw, policy, path);
  if (!r.ok) throw new ConfigError(r.issues.map((i) => `${i.path}: ${i.message}`).join('\n'));
  return r.specs;
}

function checkHosts(raw: unknown, path: string, policy: EgressPolicy, issues: EgressIssue[]): string[] {
  if (!Array.isArray(raw) || raw.length === 0) {
    issues.push({ path, message: 'must list the host names the value may be sent to, e.g. [api.github.com]' });
    return [];
  }
  const out: string[] = [];
  raw.forEach((h, i) => {
    const p = typeof h === 'string' ? parseNamePattern(h) : 'must be a host name';
    if (typeof p === 'string') {
      issues.push({ path: `${path}[${i}]`, message: p });
      return;
    }
    // A wildcard host is checked through one name under it.
    const probe = p.kind === 'wildcard' ? `x.${p.suffix}` : p.name;
    const stage = decideName(policy, parseTarget(probe)!, 443, 'connect');
    if ('refused' in stage || stage.allowedBy === undefined) {
      issues.push({ path: `${path}[${i}]`, message: `"${p.text}" is not reachable over HTTPS under this profile's egress; add it to egress.allow (or remove it here)` });
      return;
    }
    out.push(p.text);
  });
  return out;
}

function checkInjection(raw: unknown, path: string, issues: EgressIssue[]): HeaderInjection | undefined {
  if (raw === undefined) return undefined;
  if (typeof raw !== 'object' || raw === null) {
    issues.push({ path, message: 'must be { header: Authorization, value: "Bearer {value}" }' });
    return undefined;
  }
  const { header, value, ...rest } = raw as Record<string, unknown>;
  if (Object.keys(rest).length > 0) issues.push({ path, message: `has unknown keys ${Object.keys(rest).join(', ')}; the keys are header and value` });
  if (typeof header !== 'string' || !HEADER_NAME_RE.test(header) || RESERVED_HEADERS.has(header.toLowerCase())) {
    issues.push({ path: `${path}.header`, message: 'must be a header name the proxy does not manage itself (e.g. Authorization, X-Api-Key)' });
    return undefined;
  }
  if (typeof value !== 'string' || !value.includes('{value}') || /[\r\n\0]/.test(value)) {
    issues.push({ path: `${path}.value`, message: 'must be one line containing {value} where the secret goes, e.g. "Bearer {value}"' });
    return undefined;
  }
  return { header, value };
}

/** Whether `host` (normalised) is one of `patterns` (names and `*.` wildcards). */
export function hostInList(host: string, patterns: readonly string[]): boolean {
  for (const p of patterns) {
    // `*.example.com` matches below it at any depth, never `example.com` itself.
    if (p.startsWith('*.') ? host.endsWith(p.slice(1)) : p === host) return true;
  }
  return false;
}
