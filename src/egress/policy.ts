import { ConfigError } from '../errors.js';
import { ALWAYS_DENIED, canonicalIp, cidrContains, cidrWithin, classLabel, deniedClass, formatCidr, formatIp, parseCidr, parseIp, type Cidr, type IpAddress } from './addresses.js';
import { normalizeName, splitHostPort } from './names.js';

/*
 * A profile's `egress:` section, parsed and validated (pure: no lookups, no I/O). The decision
 * itself is in `decide.ts`; this file only turns the operator's entries into values it compares.
 */

export type EgressMode = 'open' | 'allowlist' | 'none';

/** One `allow:` or `deny:` entry. `text` is how the operator wrote it, normalised; rules name it. */
export type EgressEntry =
  /** `api.github.com`: that name, HTTPS (443) through CONNECT and plain HTTP (80). */
  | { kind: 'name'; name: string; text: string }
  /** `*.githubusercontent.com`: any name below it, at any depth, never the apex itself. */
  | { kind: 'wildcard'; suffix: string; text: string }
  /** `host: db.internal:5432`: a raw TCP tunnel to that name and port. */
  | { kind: 'host'; name: string; port: number; text: string }
  /**
   * `cidr: 10.20.0.0/16`: IP targets in the range, and names that resolve into it; with
   * `ports: [5432]` (allow entries only) on those ports alone.
   */
  | { kind: 'cidr'; range: Cidr; ports?: readonly number[]; text: string };

export interface EgressPolicy {
  mode: EgressMode;
  allow: readonly EgressEntry[];
  deny: readonly EgressEntry[];
  /** Static names the proxy resolves itself, before the system resolver (like extra_hosts). */
  hosts: ReadonlyMap<string, readonly IpAddress[]>;
}

/** One problem in the section: where it is (`egress.allow[2]`) and what to do about it. */
export interface EgressIssue {
  path: string;
  message: string;
}

export type EgressPolicyResult = { ok: true; policy: EgressPolicy } | { ok: false; issues: EgressIssue[] };

const MODES: readonly EgressMode[] = ['open', 'allowlist', 'none'];
const SECTION_KEYS = new Set(['mode', 'allow', 'deny', 'hosts']);

/**
 * Validates a profile's `egress:` section. Every problem is listed, each with its path and the fix.
 * No section at all is `mode: open` (the network as the backend gives it); a section names its mode.
 *
 * @example
 * checkEgressPolicy({ mode: 'allowlist', allow: ['api.github.com', { cidr: '10.20.0.0/16' }] })
 * // { ok: true, policy: { mode: 'allowlist', allow: [...2 entries], deny: [], hosts: Map {} } }
 */
export function checkEgressPolicy(raw: unknown, path = 'egress'): EgressPolicyResult {
  const issues: EgressIssue[] = [];
  if (raw === undefined || raw === null) return { ok: true, policy: emptyPolicy('open') };
  if (!isRecord(raw)) return { ok: false, issues: [{ path, message: 'must be a mapping with mode, allow, deny and hosts' }] };
  for (const key of Object.keys(raw)) {
    if (!SECTION_KEYS.has(key)) issues.push({ path: `${path}.${key}`, message: 'is not a setting; the keys are mode, allow, deny and hosts' });
  }
  const mode = raw['mode'];
  if (typeof mode !== 'string' || !MODES.includes(mode as EgressMode)) {
    issues.push({ path: `${path}.mode`, message: `must be one of ${MODES.join(', ')}` });
  }
  const allow = parseEntries(raw['allow'], `${path}.allow`, issues, 'allow');
  const deny = parseEntries(raw['deny'], `${path}.deny`, issues, 'deny');
  const hosts = parseHosts(raw['hosts'], `${path}.hosts`, issues);
  if (mode !== 'allowlist' && allow.length > 0) {
    issues.push({ path: `${path}.allow`, message: `would do nothing in mode ${String(mode)}; remove it or set mode: allowlist` });
  }
  if (mode === 'none' && (deny.length > 0 || hosts.size > 0)) {
    issues.push({ path, message: 'mode none refuses everything: deny and hosts would do nothing; remove them or set another mode' });
  }
  if (mode !== 'none') issues.push(...unreachableHosts(hosts, allow, mode === 'allowlist', path));
  if (issues.length > 0) return { ok: false, issues };
  return { ok: true, policy: Object.freeze({ mode: mode as EgressMode, allow, deny, hosts }) };
}

/**
 * `checkEgressPolicy` for callers that stop at the first bad section: throws a `ConfigError`
 * listing every issue, one per line.
 */
export function parseEgressPolicy(raw: unknown, path = 'egress'): EgressPolicy {
  const r = checkEgressPolicy(raw, path);
  if (!r.ok) throw new ConfigError(r.issues.map((i) => `${i.path}: ${i.message}`).join('\n'));
  return r.policy;
}

/** A policy with no entries: `open` lets everything but the always-denied through, `none` nothing. */
export function emptyPolicy(mode: EgressMode): EgressPolicy {
  return Object.freeze({ mode, allow: [], deny: [], hosts: new Map() });
}

function parseEntries(raw: unknown, path: string, issues: EgressIssue[], list: 'allow' | 'deny'): readonly EgressEntry[] {
  if (raw === undefined) return [];
  if (!Array.isArray(raw)) {
    issues.push({ path, message: 'must be a list of names, `host: name:port` or `cidr: range` entries' });
    return [];
  }
  const out: EgressEntry[] = [];
  raw.forEach((item, i) => {
    const r = parseEntry(item, list);
    if (typeof r === 'string') issues.push({ path: `${path}[${i}]`, message: r });
    else out.push(r);
  });
  return Object.freeze(out);
}

/** One entry, or a message naming it and the fix. */
function parseEntry(item: unknown, list: 'allow' | 'deny'): EgressEntry | string {
  if (typeof item === 'string') return parseNamePattern(item);
  const cidrWithPorts = isRecord(item) && Object.keys(item).length === 2 && 'cidr' in item && 'ports' in item;
  if (!isRecord(item) || (Object.keys(item).length !== 1 && !cidrWithPorts)) {
    return `${JSON.stringify(item)} is not an entry; write a name ("api.github.com"), a wildcard ("*.example.com"), { host: "name:port" }, { cidr: "10.0.0.0/8" } or { cidr: "10.0.0.5/32", ports: [5432] }`;
  }
  // `{ ports, cidr }` in either order: the kind is cidr.
  const [key, value] = cidrWithPorts ? ['cidr', item['cidr']] : Object.entries(item)[0]!;
  if (key !== 'host' && key !== 'cidr') return `"${key}" is not an entry kind; use host: or cidr: (or a plain name)`;
  if (typeof value !== 'string') return `${key}: must be a string`;
  if (key === 'host') return parseHostEntry(value);
  const range = parseCidr(value.trim());
  if (typeof range === 'string') return `cidr "${value}": ${range}`;
  if (!cidrWithPorts) return { kind: 'cidr', range, text: `cidr:${formatCidr(range)}` };
  if (list === 'deny') return `cidr "${value}": a deny entry refuses every port of its range; remove ports`;
  const ports = parsePorts(item['ports']);
  if (typeof ports === 'string') return `cidr "${value}": ports ${ports}`;
  return { kind: 'cidr', range, ports, text: `cidr:${formatCidr(range)} ports ${ports.join(',')}` };
}

/** `ports: [5432, 5433]`: a non-empty list of distinct TCP ports, sorted; or what is wrong with it. */
function parsePorts(raw: unknown): readonly number[] | string {
  if (!Array.isArray(raw) || raw.length === 0) return 'must be a non-empty list of port numbers, e.g. [5432]';
  const bad = raw.find((p) => typeof p !== 'number' || !Number.isInteger(p) || p < 1 || p > 65535);
  if (bad !== undefined) return `has ${JSON.stringify(bad)}, which is not a port (a whole number from 1 to 65535)`;
  return Object.freeze([...new Set(raw as number[])].sort((a, b) => a - b));
}

/** Whether a `cidr:` entry admits this port (one without `ports` admits every port). */
export function cidrAdmitsPort(entry: Extract<EgressEntry, { kind: 'cidr' }>, port: number): boolean {
  return entry.ports === undefined || entry.ports.includes(port);
}

/** Whether a name, wildcard or host entry names `name` (on `port`, for a host entry). */
export function nameEntryMatches(entry: EgressEntry, name: string, port: number): boolean {
  switch (entry.kind) {
    case 'name': return entry.name === name;
    case 'wildcard': return name.endsWith(`.${entry.suffix}`);
    case 'host': return entry.name === name && entry.port === port;
    case 'cidr': return false;
  }
}

/** `api.github.com` or `*.example.com`, as allow/deny entries and credential hosts write them. */
export function parseNamePattern(text: string): Extract<EgressEntry, { kind: 'name' | 'wildcard' }> | string {
  const t = text.trim();
  const wild = t.startsWith('*.');
  const body = wild ? t.slice(2) : t;
  if (body.includes('*')) return `"${text}": a wildcard is allowed only as a leading "*." (e.g. "*.example.com")`;
  if (splitHostPort(body) !== undefined) return `"${text}": a name entry takes no port; write { host: "${body}" } for a raw TCP tunnel to that port`;
  const n = normalizeName(body);
  if ('problem' in n) return `"${text}" ${n.problem}`;
  if (wild) {
    if (!n.name.includes('.')) return `"${text}" would match every name under a top-level domain; name a registered domain (e.g. "*.example.com")`;
    return { kind: 'wildcard', suffix: n.name, text: `*.${n.name}` };
  }
  return { kind: 'name', name: n.name, text: n.name };
}

function parseHostEntry(value: string): EgressEntry | string {
  const hp = splitHostPort(value.trim());
  if (hp === undefined) return `host "${value}": write a name and a port from 1 to 65535, e.g. "db.internal:5432"`;
  const n = normalizeName(hp.host);
  if ('problem' in n) return `host "${value}": "${hp.host}" ${n.problem}`;
  return { kind: 'host', name: n.name, port: hp.port, text: `host:${n.name}:${hp.port}` };
}

function parseHosts(raw: unknown, path: string, issues: EgressIssue[]): ReadonlyMap<string, readonly IpAddress[]> {
  const out = new Map<string, readonly IpAddress[]>();
  if (raw === undefined) return out;
  if (!isRecord(raw)) {
    issues.push({ path, message: 'must map names to addresses, e.g. { db.internal: 10.20.1.5 }' });
    return out;
  }
  for (const [name, value] of Object.entries(raw)) {
    const n = normalizeName(name);
    if ('problem' in n) {
      issues.push({ path: `${path}.${name}`, message: `"${name}" ${n.problem}` });
      continue;
    }
    const list = Array.isArray(value) ? value : [value];
    const ips = list.map((v) => (typeof v === 'string' ? parseIp(v.trim()) : undefined));
    if (list.length === 0 || ips.some((ip) => ip === undefined)) {
      issues.push({ path: `${path}.${name}`, message: 'must be an IPv4 or IPv6 address, or a list of them' });
      continue;
    }
    out.set(n.name, Object.freeze(ips.map((ip) => canonicalIp(ip!))));
  }
  return out;
}

/**
 * `hosts:` entries that could never be reached: a static address in an always-denied class
 * (private, loopback, link-local, ...) that no `cidr:` allow entry inside that class names.
 */
function unreachableHosts(hosts: ReadonlyMap<string, readonly IpAddress[]>, allow: readonly EgressEntry[], allowlist: boolean, path: string): EgressIssue[] {
  const out: EgressIssue[] = [];
  for (const [name, ips] of hosts) {
    // The ports the policy reaches the name on: its host: entries' ports (each must be open), and
    // 443 and 80 where a name or wildcard entry allows it (one of them will do: HTTPS alone is a
    // choice). None: the name is reached through a range alone, on any port.
    const byName = allow.some((e) => (e.kind === 'name' || e.kind === 'wildcard') && nameEntryMatches(e, name, 0));
    const hostPorts = [...new Set(allow.flatMap((e) => (e.kind === 'host' && e.name === name ? [e.port] : [])))];
    const ports = [...hostPorts, ...(byName ? [443, 80].filter((p) => !hostPorts.includes(p)) : [])];
    for (const ip of ips) {
      const cls = deniedClass(ip, ALWAYS_DENIED);
      if (cls === undefined) continue;
      const lifting = allow.filter((e): e is Extract<EgressEntry, { kind: 'cidr' }> => e.kind === 'cidr' && cidrContains(e.range, ip) && cidrWithin(e.range, cls.range));
      const open = (port: number): boolean => lifting.some((e) => cidrAdmitsPort(e, port));
      const unlifted = [...hostPorts.filter((p) => !open(p)), ...(byName && !open(443) && !open(80) ? [443, 80] : [])];
      if (lifting.length > 0 && unlifted.length === 0) continue;
      const entry = `{ cidr: ${formatIp(ip)}/${ip.family === 4 ? 32 : 128}, ports: [${ports.length > 0 ? ports.join(', ') : 'PORT'}] }`;
      const fix = allowlist
        ? `add ${entry} to ${path}.allow (${ports.length > 0 ? 'the ports the policy reaches it on' : 'the ports it serves'}; a cidr: entry without ports opens every port of its range)`
        : 'only mode allowlist with a cidr: entry naming it can allow it';
      const why = lifting.length === 0 ? 'an address berth always refuses unless a cidr: allow entry names it' : `an address berth always refuses, and the cidr: entries naming it leave out port${unlifted.length > 1 ? 's' : ''} ${unlifted.join(', ')}, which the policy reaches it on`;
      out.push({ path: `${path}.hosts.${name}`, message: `maps ${name} to ${formatIp(ip)} (${classLabel(ip, cls)}), ${why}; ${fix}` });
      break;
    }
  }
  return out;
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** One entry as it is written in the config (`api.github.com`, `{ host: db:5432 }`, `{ cidr: 10.0.0.0/8 }`). */
function entryView(e: EgressEntry): string | Record<string, string | readonly number[]> {
  if (e.kind === 'host') return { host: `${e.name}:${e.port}` };
  if (e.kind === 'cidr') return e.ports === undefined ? { cidr: formatCidr(e.range) } : { cidr: formatCidr(e.range), ports: e.ports };
  return e.text;
}

/**
 * A policy as the config writes it, for `berth config check` and `explain`: the mode, and the
 * lists and static names that mode uses.
 *
 * @example
 * policyView(parseEgressPolicy({ mode: 'allowlist', allow: ['api.github.com'] })) // { mode: 'allowlist', allow: ['api.github.com'] }
 */
export function policyView(p: EgressPolicy): { mode: EgressMode; allow?: unknown[]; deny?: unknown[]; hosts?: Record<string, string[]> } {
  return {
    mode: p.mode,
    ...(p.allow.length === 0 ? {} : { allow: p.allow.map(entryView) }),
    ...(p.deny.length === 0 ? {} : { deny: p.deny.map(entryView) }),
    ...(p.hosts.size === 0 ? {} : { hosts: Object.fromEntries([...p.hosts].map(([n, ips]) => [n, ips.map(formatIp)])) }),
  };
}
