import { describe, expect, it } from 'vitest';
import { checkCredentials } from '../../src/egress/credentials.js';
import { decide, decideName } from '../../src/egress/decide.js';
import { parseTarget } from '../../src/egress/names.js';
import { checkEgressPolicy, parseEgressPolicy, policyView } from '../../src/egress/policy.js';
import { parseIp } from '../../src/egress/addresses.js';
import { ConfigError } from '../../src/errors.js';

const ip = (t: string) => parseIp(t)!;
const PUBLIC = [ip('198.51.100.7')];

function issues(raw: unknown): string[] {
  const r = checkEgressPolicy(raw);
  return r.ok ? [] : r.issues.map((i) => `${i.path}: ${i.message}`);
}

describe('parseEgressPolicy: entries', () => {
  it('normalises names: case, trailing dot', () => {
    const p = parseEgressPolicy({ mode: 'allowlist', allow: ['API.GitHub.com.', '*.GitHubUserContent.com'] });
    expect(p.allow.map((e) => e.text)).toEqual(['api.github.com', '*.githubusercontent.com']);
  });

  it.each([
    ['*.foo*.com', 'a wildcard is allowed only as a leading "*."'],
    ['foo.*.com', 'a wildcard is allowed only as a leading "*."'],
    ['a*.example.com', 'a wildcard is allowed only as a leading "*."'],
    ['*.com', 'would match every name under a top-level domain'],
    ['bad_host-.example', 'invalid label'],
    ['a..b', 'empty label'],
    ['bücher.de', 'write it as its IDNA A-label "xn--bcher-kva.de"'],
    ['10.0.0.1', 'is an IP address, not a name; use a `cidr:` entry'],
    ['127.1', 'is an IP address'],
    ['[::1]', 'is an IP address'],
    ['api.github.com:443', 'write { host: "api.github.com:443" }'],
    [{ host: 'db.internal' }, 'write a name and a port from 1 to 65535'],
    [{ host: 'db.internal:0' }, 'write a name and a port'],
    [{ host: 'db.internal:70000' }, 'write a name and a port'],
    [{ host: '10.0.0.1:5432' }, 'is an IP address'],
    [{ cidr: '10.1.2.3/8' }, 'has host bits set; write the network address (10.0.0.0/8)'],
    [{ cidr: '10.0.0.0/33' }, 'is not a number from 0 to 32'],
    [{ cidr: 'db.internal/8' }, 'is not an IPv4 or IPv6 address'],
    [{ port: 22 }, '"port" is not an entry kind'],
    [{ host: 'a:1', cidr: '10.0.0.0/8' }, 'is not an entry'],
    [{ cidr: '10.0.0.5/32', ports: [] }, 'ports must be a non-empty list of port numbers'],
    [{ cidr: '10.0.0.5/32', ports: 5432 }, 'ports must be a non-empty list of port numbers'],
    [{ cidr: '10.0.0.5/32', ports: [5432, 70000] }, 'ports has 70000, which is not a port'],
    [{ cidr: '10.0.0.5/32', ports: ['5432'] }, 'ports has "5432", which is not a port'],
    [{ host: 'a:1', ports: [1] }, 'is not an entry'],
  ])('refuses %j naming the entry and the fix', (entry, message) => {
    const found = issues({ mode: 'allowlist', allow: [entry] });
    expect(found).toHaveLength(1);
    expect(found[0]).toMatch(/^egress\.allow\[0\]: /);
    expect(found[0]).toContain(message);
  });

  it('lists every problem, each with its path', () => {
    expect(issues({ mode: 'allow', allow: ['ok.example', '*.x*.y'], deny: [{ cidr: 'x' }], hosts: { 'db.internal': 'nope' }, extra: 1 })).toEqual([
      'egress.extra: is not a setting; the keys are mode, allow, deny and hosts',
      'egress.mode: must be one of open, allowlist, none',
      'egress.allow[1]: "*.x*.y": a wildcard is allowed only as a leading "*." (e.g. "*.example.com")',
      'egress.deny[0]: cidr "x": "x" is not an IPv4 or IPv6 address',
      'egress.hosts.db.internal: must be an IPv4 or IPv6 address, or a list of them',
      'egress.allow: would do nothing in mode allow; remove it or set mode: allowlist',
    ]);
  });

  it('refuses settings that would do nothing', () => {
    expect(issues({ mode: 'open', allow: ['a.example'] })).toEqual(['egress.allow: would do nothing in mode open; remove it or set mode: allowlist']);
    expect(issues({ mode: 'none', deny: ['a.example'] })[0]).toContain('mode none refuses everything');
  });

  it('a deny cidr: entry takes no ports (it refuses every port of its range)', () => {
    expect(issues({ mode: 'allowlist', allow: ['a.example'], deny: [{ cidr: '10.0.0.0/8', ports: [22] }] })).toEqual([
      'egress.deny[0]: cidr "10.0.0.0/8": a deny entry refuses every port of its range; remove ports',
    ]);
  });

  it('throws one ConfigError with every line', () => {
    expect(() => parseEgressPolicy({ mode: 'allowlist', allow: ['*.x*.y', { cidr: '1.2.3.4/8' }] })).toThrow(ConfigError);
    expect(() => parseEgressPolicy({ mode: 'allowlist', allow: ['*.x*.y', { cidr: '1.2.3.4/8' }] })).toThrow(/allow\[0\].*\n.*allow\[1\]/);
  });

  it('no section is mode open; a section names its mode', () => {
    expect(parseEgressPolicy(undefined).mode).toBe('open');
    expect(issues({ allow: ['a.example'] })[0]).toBe('egress.mode: must be one of open, allowlist, none');
  });
});

describe('decide', () => {
  const policy = parseEgressPolicy({
    mode: 'allowlist',
    allow: ['api.github.com', '*.githubusercontent.com', { host: 'db.internal:5432' }, { cidr: '10.20.0.0/16' }, { cidr: '203.0.113.0/24' }],
    deny: ['bad.githubusercontent.com', { cidr: '203.0.113.128/25' }],
    hosts: { 'db.internal': '10.20.1.5' },
  });
  const at = (host: string, port: number, via: 'connect' | 'http' = 'connect', addresses = PUBLIC) => decide(policy, { host, port, via, addresses });

  it('an exact name: HTTPS through CONNECT on 443, plain HTTP on 80, nothing else', () => {
    expect(at('api.github.com', 443)).toEqual({ allowed: true, rule: 'allow api.github.com', carry: 'tls' });
    expect(at('API.github.com.', 80, 'http')).toEqual({ allowed: true, rule: 'allow api.github.com', carry: 'http' });
    expect(at('api.github.com', 22)).toMatchObject({ allowed: false, rule: 'not in egress.allow' });
    expect(at('api.github.com', 80)).toMatchObject({ allowed: false });
    expect(at('api.github.com', 443, 'http')).toMatchObject({ allowed: false });
    expect(at('github.com', 443)).toMatchObject({ allowed: false, rule: 'not in egress.allow' });
    expect(at('xapi.github.com', 443)).toMatchObject({ allowed: false });
  });

  it('a wildcard: any depth below, never the apex', () => {
    expect(at('raw.githubusercontent.com', 443)).toMatchObject({ allowed: true, rule: 'allow *.githubusercontent.com' });
    expect(at('a.b.githubusercontent.com', 443)).toMatchObject({ allowed: true });
    expect(at('githubusercontent.com', 443)).toMatchObject({ allowed: false });
    expect(at('evilgithubusercontent.com', 443)).toMatchObject({ allowed: false });
  });

  it('deny beats allow, for names and ranges', () => {
    expect(at('bad.githubusercontent.com', 443)).toEqual({ allowed: false, rule: 'deny bad.githubusercontent.com' });
    expect(at('203.0.113.200', 443)).toMatchObject({ allowed: false, rule: 'deny cidr:203.0.113.128/25' });
    expect(at('api.github.com', 443, 'connect', [ip('203.0.113.129')])).toMatchObject({ allowed: false, rule: 'deny cidr:203.0.113.128/25' });
  });

  it('a host entry: a raw tunnel to that port only, through a private address only because a cidr entry names it', () => {
    expect(at('db.internal', 5432, 'connect', [ip('10.20.1.5')])).toEqual({ allowed: true, rule: 'allow host:db.internal:5432', carry: 'raw' });
    expect(decide(policy, { host: 'db.internal', port: 5432, via: 'connect' })).toMatchObject({ allowed: true });
    expect(at('db.internal', 5433, 'connect', [ip('192.168.1.1')])).toMatchObject({ allowed: false });
    expect(at('db.internal', 5432, 'http', [ip('10.20.1.5')])).toMatchObject({ allowed: true, rule: 'allow cidr:10.20.0.0/16' });
  });

  it('raw IP targets only through a cidr entry; names only through egress.hosts, never a lookup', () => {
    expect(at('203.0.113.5', 8443)).toEqual({ allowed: true, rule: 'allow cidr:203.0.113.0/24', carry: 'raw' });
    expect(at('198.51.100.7', 443)).toMatchObject({ allowed: false, rule: 'not in egress.allow' });
    // db.internal is in egress.hosts: its static address is checked against the ranges.
    expect(at('db.internal', 9000, 'connect', [ip('10.20.1.5')])).toMatchObject({ allowed: true, rule: 'allow cidr:10.20.0.0/16' });
    // Any other name is refused before a lookup, wherever it would resolve: no question leaves.
    for (const name of ['other.example', 'c2stbGl2ZS0wMTIz.attacker.example']) {
      const stage = decideName(policy, parseTarget(name)!, 9000, 'connect');
      expect(stage).toEqual({ refused: expect.objectContaining({ allowed: false, rule: 'not in egress.allow', detail: expect.stringContaining('only when the policy names it') as unknown }) });
    }
    // A name a wildcard names, on a port only the range allows: looked up (the operator named it), then every address must be in the range.
    const corp = parseEgressPolicy({ mode: 'allowlist', allow: ['*.corp.example', { cidr: '10.0.0.0/8' }] });
    expect(decideName(corp, parseTarget('git.corp.example')!, 22, 'connect')).toMatchObject({ lookup: true });
    expect(decide(corp, { host: 'git.corp.example', port: 22, via: 'connect', addresses: [ip('10.1.2.3')] })).toMatchObject({ allowed: true, rule: 'allow cidr:10.0.0.0/8' });
    expect(decide(corp, { host: 'git.corp.example', port: 22, via: 'connect', addresses: [ip('198.51.100.7')] })).toMatchObject({ allowed: false });
    expect(at('other.example', 9000, 'connect', [ip('10.20.3.4')])).toMatchObject({ allowed: false, rule: 'not in egress.allow' });
    const names = parseEgressPolicy({ mode: 'allowlist', allow: ['api.github.com'] });
    expect(decide(names, { host: '198.51.100.7', port: 443, via: 'connect' })).toMatchObject({
      allowed: false, rule: 'not in egress.allow', detail: 'an IP address is reached only through a cidr: entry',
    });
  });

  it('a cidr entry with ports admits those ports only, and lifts an always-denied class for those only', () => {
    const db = parseEgressPolicy({
      mode: 'allowlist',
      allow: [{ host: 'db.internal:5432' }, { cidr: '10.20.1.5/32', ports: [5432, 5432, 22] }, { cidr: '203.0.113.0/24', ports: [8443] }],
      hosts: { 'db.internal': '10.20.1.5' },
    });
    expect(db.allow[1]).toMatchObject({ kind: 'cidr', ports: [22, 5432], text: 'cidr:10.20.1.5/32 ports 22,5432' });
    expect(decide(db, { host: 'db.internal', port: 5432, via: 'connect' })).toEqual({ allowed: true, rule: 'allow host:db.internal:5432', carry: 'raw' });
    expect(decide(db, { host: '10.20.1.5', port: 5432, via: 'connect' })).toEqual({ allowed: true, rule: 'allow cidr:10.20.1.5/32 ports 22,5432', carry: 'raw' });
    // Another port of the same private address: still always denied, the refusal says which ports the entry allows.
    expect(decide(db, { host: '10.20.1.5', port: 6379, via: 'connect' })).toEqual({
      allowed: false, rule: 'always denied: private', detail: '10.20.1.5 is in cidr:10.20.1.5/32 ports 22,5432, which allows ports 22, 5432 only',
    });
    expect(decide(db, { host: 'db.internal', port: 6379, via: 'connect' })).toMatchObject({ allowed: false, rule: 'always denied: private' });
    // A public range with a port: that port by IP, no other.
    expect(decide(db, { host: '203.0.113.9', port: 8443, via: 'connect' })).toMatchObject({ allowed: true, rule: 'allow cidr:203.0.113.0/24 ports 8443' });
    expect(decide(db, { host: '203.0.113.9', port: 443, via: 'connect' })).toEqual({
      allowed: false, rule: 'not in egress.allow', detail: '203.0.113.9 is in cidr:203.0.113.0/24 ports 8443, which allows port 8443 only',
    });
    expect(policyView(db).allow).toContainEqual({ cidr: '10.20.1.5/32', ports: [22, 5432] });
    // Written ports first, as YAML may order it: the same entry.
    expect(parseEgressPolicy({ mode: 'allowlist', allow: [{ ports: [5432], cidr: '10.20.1.5/32' }] }).allow[0]).toMatchObject({ kind: 'cidr', ports: [5432] });
  });

  it('a range inside an always-denied class lifts it even when a wider range is listed first', () => {
    const wide = parseEgressPolicy({ mode: 'allowlist', allow: [{ cidr: '0.0.0.0/0' }, { cidr: '10.20.1.5/32', ports: [5432] }] });
    expect(decide(wide, { host: '10.20.1.5', port: 5432, via: 'connect' })).toEqual({ allowed: true, rule: 'allow cidr:10.20.1.5/32 ports 5432', carry: 'raw' });
    expect(decide(wide, { host: '10.20.1.5', port: 22, via: 'connect' })).toMatchObject({ allowed: false, rule: 'always denied: private' });
    expect(decide(wide, { host: '203.0.113.9', port: 22, via: 'connect' })).toMatchObject({ allowed: true, rule: 'allow cidr:0.0.0.0/0' });
  });

  it('every address of a name is checked: one private address refuses the name', () => {
    expect(at('api.github.com', 443, 'connect', [ip('198.51.100.7'), ip('127.0.0.1')])).toMatchObject({ allowed: false, rule: 'always denied: loopback' });
  });

  it('mode open lets any name and port through but not the always-denied; mode none nothing', () => {
    const open = parseEgressPolicy({ mode: 'open', deny: ['evil.example'] });
    expect(decide(open, { host: 'x.example', port: 22, via: 'connect', addresses: PUBLIC })).toEqual({ allowed: true, rule: 'mode open', carry: 'raw' });
    expect(decide(open, { host: 'x.example', port: 443, via: 'connect', addresses: PUBLIC })).toMatchObject({ carry: 'tls' });
    expect(decide(open, { host: 'evil.example', port: 443, via: 'connect', addresses: PUBLIC })).toMatchObject({ allowed: false, rule: 'deny evil.example' });
    expect(decide(open, { host: '169.254.169.254', port: 80, via: 'http' })).toMatchObject({ allowed: false, rule: 'always denied: metadata (link-local)' });
    const none = parseEgressPolicy({ mode: 'none' });
    expect(decide(none, { host: 'api.github.com', port: 443, via: 'connect', addresses: PUBLIC })).toEqual({ allowed: false, rule: 'mode none' });
  });
});

describe('checkCredentials', () => {
  const policy = parseEgressPolicy({ mode: 'allowlist', allow: ['api.github.com', 'github.com', '*.example.com', { host: 'db.internal:5432' }] });

  it('accepts hosts the policy lets through over HTTPS by name, with a default from', () => {
    expect(checkCredentials({ GITHUB_TOKEN: { hosts: ['api.github.com', 'GitHub.com'] }, K: { from: 'K2', hosts: ['*.example.com'], inject: { header: 'X-Api-Key', value: '{value}' } } }, policy)).toEqual({
      ok: true,
      specs: [
        { name: 'GITHUB_TOKEN', from: 'GITHUB_TOKEN', hosts: ['api.github.com', 'github.com'] },
        { name: 'K', from: 'K2', hosts: ['*.example.com'], inject: { header: 'X-Api-Key', value: '{value}' } },
      ],
    });
  });

  it('refuses a credential host its profile egress does not allow, naming the fix', () => {
    const r = checkCredentials({ T: { hosts: ['api.github.com', 'evil.example', 'db.internal'] } }, policy);
    expect(r).toEqual({
      ok: false,
      issues: [
        { path: 'credentials.T.hosts[1]', message: '"evil.example" is not reachable over HTTPS under this profile\'s egress; add it to egress.allow (or remove it here)' },
        { path: 'credentials.T.hosts[2]', message: '"db.internal" is not reachable over HTTPS under this profile\'s egress; add it to egress.allow (or remove it here)' },
      ],
    });
    expect(checkCredentials({ T: { hosts: ['api.github.com'] } }, parseEgressPolicy({ mode: 'none' })).ok).toBe(false);
  });

  it('refuses bad names, no hosts, and an injection that cannot work', () => {
    const r = checkCredentials({
      '1BAD': { hosts: ['api.github.com'] },
      NOHOSTS: { hosts: [] },
      H: { hosts: ['api.github.com'], inject: { header: 'Host', value: '{value}' } },
      V: { hosts: ['api.github.com'], inject: { header: 'Authorization', value: 'Bearer' } },
      X: { hosts: ['api.github.com'], extra: true },
    }, policy);
    expect(r.ok).toBe(false);
    if (r.ok) return;
    expect(r.issues.map((i) => i.path)).toEqual(['credentials.1BAD', 'credentials.NOHOSTS.hosts', 'credentials.H.inject.header', 'credentials.V.inject.value', 'credentials.X.extra']);
  });
});
