import { createHash, createHmac, randomBytes, timingSafeEqual } from 'node:crypto';

/*
 * OpenSSH known_hosts, as sshd(8) "SSH_KNOWN_HOSTS FILE FORMAT" describes it: pure parsing,
 * matching and formatting, no I/O. Each line is `[@marker] patterns keytype base64-key [comment]`;
 * patterns are comma-separated globs (`*`, `?`, `!` negates) or one hashed name
 * `|1|base64(salt)|base64(HMAC-SHA1(salt, name))`; a host on a port other than 22 is written
 * `[host]:port`. Names compare case-insensitively.
 */

/** A parsed known_hosts entry. */
export interface KnownHost {
  /** 1-based line number in the file, for messages. */
  line: number;
  marker: 'cert-authority' | 'revoked' | undefined;
  hosts: HostPatterns;
  keyType: string;
  /** The public key blob (what the server sends during key exchange). */
  key: Buffer;
}

export type HostPatterns =
  | { kind: 'hashed'; salt: Buffer; hash: Buffer }
  | { kind: 'patterns'; list: { negated: boolean; glob: string }[] };

/** The name an entry is written and matched under: `host` on port 22, `[host]:port` otherwise. */
export function hostEntryName(host: string, port: number): string {
  const h = host.toLowerCase();
  return port === 22 ? h : `[${h}]:${port}`;
}

/**
 * Parses known_hosts text. Lines that are blank, comments or malformed are skipped, as ssh does
 * (a malformed line never matches, so it can neither trust nor revoke a key).
 */
export function parseKnownHosts(text: string): KnownHost[] {
  const out: KnownHost[] = [];
  const lines = text.split(/\r?\n/);
  for (let i = 0; i < lines.length; i++) {
    const entry = parseLine(lines[i] ?? '', i + 1);
    if (entry !== undefined) out.push(entry);
  }
  return out;
}

function parseLine(raw: string, line: number): KnownHost | undefined {
  const text = raw.trim();
  if (text === '' || text.startsWith('#')) return undefined;
  const words = text.split(/[ \t]+/);
  let marker: KnownHost['marker'];
  if (words[0]?.startsWith('@')) {
    const m = words.shift();
    if (m === '@cert-authority') marker = 'cert-authority';
    else if (m === '@revoked') marker = 'revoked';
    else return undefined;
  }
  const [hostField, keyType, b64] = words;
  if (hostField === undefined || keyType === undefined || b64 === undefined) return undefined;
  if (!/^[A-Za-z0-9+/]+={0,2}$/.test(b64)) return undefined;
  const key = Buffer.from(b64, 'base64');
  // The blob names its own type; a line whose type field disagrees is corrupt.
  if (keyTypeOf(key) !== keyType) return undefined;
  const hosts = parseHosts(hostField);
  if (hosts === undefined) return undefined;
  return { line, marker, hosts, keyType, key };
}

function parseHosts(field: string): HostPatterns | undefined {
  if (field.startsWith('|')) {
    const m = /^\|1\|([A-Za-z0-9+/]+={0,2})\|([A-Za-z0-9+/]+={0,2})$/.exec(field);
    if (m === null) return undefined;
    const salt = Buffer.from(m[1] as string, 'base64');
    const hash = Buffer.from(m[2] as string, 'base64');
    if (salt.length !== 20 || hash.length !== 20) return undefined;
    return { kind: 'hashed', salt, hash };
  }
  const list = field
    .split(',')
    .filter((p) => p !== '' && p !== '!')
    .map((p) => (p.startsWith('!') ? { negated: true, glob: p.slice(1).toLowerCase() } : { negated: false, glob: p.toLowerCase() }));
  return list.length === 0 ? undefined : { kind: 'patterns', list };
}

/** The key type string at the start of an SSH public key blob, or undefined when it is not one. */
export function keyTypeOf(blob: Buffer): string | undefined {
  if (blob.length < 4) return undefined;
  const len = blob.readUInt32BE(0);
  if (len === 0 || len > 64 || blob.length < 4 + len) return undefined;
  const type = blob.subarray(4, 4 + len).toString('latin1');
  return /^[a-z0-9@.-]+$/i.test(type) ? type : undefined;
}

/** Whether an entry applies to `name` (from `hostEntryName`): a negated pattern vetoes. */
export function matchesHost(hosts: HostPatterns, name: string): boolean {
  if (hosts.kind === 'hashed') {
    const mac = createHmac('sha1', hosts.salt).update(name).digest();
    return timingSafeEqual(mac, hosts.hash);
  }
  let hit = false;
  for (const p of hosts.list) {
    if (!globMatch(p.glob, name)) continue;
    if (p.negated) return false;
    hit = true;
  }
  return hit;
}

/** `*` (any run) and `?` (one character), the whole string; iterative, no backtracking blow-up. */
function globMatch(glob: string, s: string): boolean {
  let g = 0;
  let i = 0;
  let starG = -1;
  let starI = 0;
  while (i < s.length) {
    const c = glob[g];
    if (c === '?' || (c !== undefined && c !== '*' && c === s[i])) {
      g++;
      i++;
    } else if (c === '*') {
      starG = g++;
      starI = i;
    } else if (starG >= 0) {
      g = starG + 1;
      i = ++starI;
    } else {
      return false;
    }
  }
  while (glob[g] === '*') g++;
  return g === glob.length;
}

/** `SHA256:<base64, no padding>`, as `ssh-keygen -lf` and ssh print it. */
export function fingerprintOf(blob: Buffer): string {
  return `SHA256:${createHash('sha256').update(blob).digest('base64').replace(/=+$/, '')}`;
}

/**
 * One known_hosts line trusting `blob` for `name`. `hashed` writes the name as
 * `|1|salt|hmac` (what `HashKnownHosts yes` writes), so the file does not list the hosts berth uses.
 */
export function formatKnownHost(name: string, blob: Buffer, opts: { hashed: boolean; salt?: Buffer } = { hashed: false }): string {
  const type = keyTypeOf(blob) ?? 'unknown';
  let hostField = name;
  if (opts.hashed) {
    const salt = opts.salt ?? randomBytes(20);
    const mac = createHmac('sha1', salt).update(name).digest();
    hostField = `|1|${salt.toString('base64')}|${mac.toString('base64')}`;
  }
  return `${hostField} ${type} ${blob.toString('base64')}`;
}

/** What known_hosts says about the key a host presented. */
export type HostKeyVerdict =
  | { kind: 'trusted'; entry: KnownHost }
  | { kind: 'revoked'; entry: KnownHost }
  | { kind: 'changed'; entries: KnownHost[] }
  | { kind: 'cert-authority-only'; entry: KnownHost }
  | { kind: 'unknown' };

/**
 * Judges the key `blob` presented by the host known as `name`. A key listed `@revoked` anywhere
 * in the file is refused whatever its host patterns say (a revoked key must never be accepted);
 * then a plain entry for the name with the same key trusts it; an entry for the name with
 * another key of the same type means the key changed; a `@cert-authority` entry alone cannot
 * vouch (berth does not verify host certificates); nothing else is unknown.
 */
export function judgeHostKey(entries: readonly KnownHost[], name: string, blob: Buffer): HostKeyVerdict {
  const revoked = entries.find((e) => e.marker === 'revoked' && e.key.equals(blob));
  if (revoked !== undefined) return { kind: 'revoked', entry: revoked };
  const forHost = entries.filter((e) => e.marker !== 'revoked' && matchesHost(e.hosts, name));
  const plain = forHost.filter((e) => e.marker === undefined);
  const same = plain.find((e) => e.key.equals(blob));
  if (same !== undefined) return { kind: 'trusted', entry: same };
  const type = keyTypeOf(blob);
  const other = plain.filter((e) => e.keyType === type);
  if (other.length > 0) return { kind: 'changed', entries: other };
  const ca = forHost.find((e) => e.marker === 'cert-authority');
  if (ca !== undefined) return { kind: 'cert-authority-only', entry: ca };
  return { kind: 'unknown' };
}

/** Host key algorithms that verify each key type ssh2 can negotiate. */
const ALGORITHMS_OF: Readonly<Record<string, readonly string[]>> = {
  'ssh-ed25519': ['ssh-ed25519'],
  'ecdsa-sha2-nistp256': ['ecdsa-sha2-nistp256'],
  'ecdsa-sha2-nistp384': ['ecdsa-sha2-nistp384'],
  'ecdsa-sha2-nistp521': ['ecdsa-sha2-nistp521'],
  'ssh-rsa': ['rsa-sha2-512', 'rsa-sha2-256', 'ssh-rsa'],
  'ssh-dss': ['ssh-dss'],
};

/**
 * The host key algorithms to offer for `name`: those of the key types known_hosts trusts for
 * it, in file order, so the host presents a key that can be checked (ssh does the same); an
 * empty list when none is known (the host is unknown: any type may be presented and judged).
 */
export function hostKeyAlgorithmsFor(entries: readonly KnownHost[], name: string): string[] {
  const out: string[] = [];
  for (const e of entries) {
    if (e.marker !== undefined || !matchesHost(e.hosts, name)) continue;
    for (const a of ALGORITHMS_OF[e.keyType] ?? []) if (!out.includes(a)) out.push(a);
  }
  return out;
}
