import { networkInterfaces } from 'node:os';
import { describe, expect, it } from 'vitest';
import { canonicalIp, formatIp, parseIp } from '../../src/egress/addresses.js';
import { decide } from '../../src/egress/decide.js';
import { parseTarget } from '../../src/egress/names.js';
import { parseEgressPolicy } from '../../src/egress/policy.js';
import { deniedRanges } from '../../src/egress/target.js';

/* The always-denied address classes: every class, in every spelling a client could use. */

const open = parseEgressPolicy({ mode: 'open' });
const names = parseEgressPolicy({ mode: 'allowlist', allow: ['api.example.test'] });
const ip = (t: string) => parseIp(t)!;
const denied = deniedRanges([{ cidr: '203.0.113.64/26', label: 'berth sandbox network' }]);

/** What a name resolving to `address` gets, and what the address as a raw target gets in mode open. */
function viaName(address: string) {
  return decide(names, { host: 'api.example.test', port: 443, via: 'connect', addresses: [canonicalIp(ip(address))] }, denied);
}
function asTarget(host: string) {
  return decide(open, { host, port: 443, via: 'connect' }, denied);
}

describe('always denied', () => {
  it.each([
    ['127.0.0.1', 'loopback'], ['127.255.255.254', 'loopback'], ['::1', 'loopback'],
    ['169.254.169.254', 'metadata (link-local)'], ['169.254.1.1', 'link-local'], ['fe80::1', 'link-local'],
    ['0.0.0.0', 'this-network'], ['0.1.2.3', 'this-network'], ['::', 'unspecified'],
    ['10.1.2.3', 'private'], ['172.16.0.1', 'private'], ['172.31.255.255', 'private'], ['192.168.1.1', 'private'], ['fd00::1', 'private'], ['fc00::1', 'private'],
    ['100.64.0.1', 'cgnat'], ['100.127.255.255', 'cgnat'],
    ['224.0.0.1', 'multicast'], ['239.255.255.250', 'multicast'], ['ff02::1', 'multicast'],
    ['240.0.0.1', 'reserved'], ['255.255.255.255', 'reserved'],
    ['203.0.113.70', 'berth sandbox network'],
  ])('%s is %s, by name and as a target', (address, label) => {
    expect(viaName(address)).toMatchObject({ allowed: false, rule: `always denied: ${label}` });
    expect(asTarget(address)).toMatchObject({ allowed: false, rule: `always denied: ${label}` });
  });

  it.each([
    ['::ffff:127.0.0.1', 'loopback'], ['::ffff:7f00:1', 'loopback'], ['0:0:0:0:0:ffff:7f00:0001', 'loopback'],
    ['::127.0.0.1', 'loopback'], ['64:ff9b::127.0.0.1', 'loopback'], ['::ffff:169.254.169.254', 'metadata (link-local)'],
    ['::ffff:10.0.0.1', 'private'], ['::ffff:192.168.0.1', 'private'], ['64:ff9b::a9fe:a9fe', 'metadata (link-local)'],
  ])('the IPv6 form %s is checked as the IPv4 address it carries (%s)', (address, label) => {
    expect(viaName(address)).toMatchObject({ allowed: false, rule: `always denied: ${label}` });
    expect(asTarget(`[${address}]`)).toMatchObject({ allowed: false, rule: `always denied: ${label}` });
  });

  it.each(['127.1', '2130706433', '0x7f000001', '0x7f.0.0.1', '0177.0.0.1', '169.254.43518'])(
    'the IPv4 shorthand %s is an IP target (never looked up as a name) and is refused',
    (host) => {
      expect(parseTarget(host)?.kind).toBe('ip');
      expect(asTarget(host)).toMatchObject({ allowed: false });
      expect(asTarget(host).rule).toMatch(/^always denied: (loopback|metadata)/);
    },
  );

  it("every address of this host's interfaces is refused", () => {
    const own = Object.values(networkInterfaces()).flat().map((a) => a!.address.split('%')[0]!)
      .filter((a) => !/^(127\.|::1$|fe80:)/.test(a));
    for (const a of own) expect(viaName(a), a).toMatchObject({ allowed: false });
    const nonLoopbackPublic = own.filter((a) => viaName(a).rule === 'always denied: host address');
    // Whatever else the host has, a public-looking address of its own is refused as one.
    for (const a of nonLoopbackPublic) expect(asTarget(a).rule).toBe('always denied: host address');
  });

  it('a public address passes', () => {
    expect(viaName('198.51.100.7')).toMatchObject({ allowed: true });
    expect(viaName('2001:db8::1')).toMatchObject({ allowed: true });
  });
});

describe('cidr entries and the always-denied classes', () => {
  it('a range inside a class lifts it for exactly that range', () => {
    const p = parseEgressPolicy({ mode: 'allowlist', allow: [{ cidr: '10.20.0.0/16' }, { cidr: '127.0.0.2/32' }] });
    expect(decide(p, { host: '10.20.1.5', port: 5432, via: 'connect' }, denied)).toMatchObject({ allowed: true, rule: 'allow cidr:10.20.0.0/16' });
    expect(decide(p, { host: '10.21.1.5', port: 5432, via: 'connect' }, denied)).toMatchObject({ allowed: false });
    expect(decide(p, { host: '127.0.0.2', port: 80, via: 'http' }, denied)).toMatchObject({ allowed: true });
    expect(decide(p, { host: '127.0.0.1', port: 80, via: 'http' }, denied)).toMatchObject({ allowed: false });
  });

  it('a range wider than a class does not lift it: 0.0.0.0/0 opens the internet, not loopback or metadata', () => {
    const p = parseEgressPolicy({ mode: 'allowlist', allow: [{ cidr: '0.0.0.0/0' }, { cidr: '::/0' }] });
    expect(decide(p, { host: '198.51.100.7', port: 443, via: 'connect' }, denied)).toMatchObject({ allowed: true });
    expect(decide(p, { host: '127.0.0.1', port: 443, via: 'connect' }, denied)).toMatchObject({ allowed: false, rule: 'always denied: loopback' });
    expect(decide(p, { host: '169.254.169.254', port: 80, via: 'http' }, denied)).toMatchObject({ allowed: false, rule: 'always denied: metadata (link-local)' });
    expect(decide(p, { host: '[::ffff:10.0.0.1]', port: 443, via: 'connect' }, denied)).toMatchObject({ allowed: false, rule: 'always denied: private' });
  });
});

describe('address forms', () => {
  it('formats canonical addresses', () => {
    expect(formatIp(canonicalIp(ip('::ffff:7f00:1')))).toBe('127.0.0.1');
    expect(formatIp(ip('2001:db8:0:0:1:0:0:1'))).toBe('2001:db8::1:0:0:1');
    expect(formatIp(ip('::'))).toBe('::');
    expect(formatIp(ip('fe80::1'))).toBe('fe80::1');
  });

  it('refuses zones and garbage', () => {
    expect(parseIp('fe80::1%eth0')).toBeUndefined();
    expect(parseIp('1.2.3')).toBeUndefined();
    expect(parseTarget('exa mple.com')).toBeUndefined();
    expect(parseTarget('[not-an-ip]')).toBeUndefined();
  });
});
