import type { V1NetworkPolicy, V1NetworkPolicySpec } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { cidrContains, parseCidr, parseIp, type Cidr } from '../../src/egress/addresses.js';
import { tenantNetworkPolicy } from '../../src/backends/kubernetes/manifests.js';
import { BLOCKED_V4, BLOCKED_V6 } from '../../src/backends/kubernetes/network-ranges.js';
import { policyDifferences } from '../../src/backends/kubernetes/network-policies.js';
import { KUBERNETES_DEFAULTS, type KubernetesSettings } from '../../src/backends/kubernetes/settings.js';
import { parseConfig } from '../../src/setup/parse-config.js';
import { storedNetworkPolicy } from '../k8s-standin/network-policy-storage.js';
import { loadValidator } from '../schemas/validate.js';
import { configErrorOf } from '../helpers/config-problem.js';

/*
 * The tenant NetworkPolicy's egress as a cluster would apply it: DNS to the resolver pods picked
 * by namespace and labels, and to a node-local cache's address; everything else outside the
 * blocked ranges, in both families. Its settings are checked at start-up, and a live policy that
 * differs from the one berth writes is named.
 */

const validator = loadValidator();
const policyOf = (k: Partial<KubernetesSettings> = {}): V1NetworkPolicy => tenantNetworkPolicy('inst-1', 'acme', { ...KUBERNETES_DEFAULTS, ...k });

function range(text: string): Cidr {
  const r = parseCidr(text);
  if (typeof r === 'string') throw new Error(r);
  return r;
}

/** Whether the policy's egress admits `address:port` by an ipBlock (as a CNI evaluates ipBlock peers; rules add up). */
function admits(np: V1NetworkPolicy, address: string, port: number): boolean {
  const ip = parseIp(address)!;
  return (np.spec!.egress ?? []).some((rule) => {
    const portOk = rule.ports === undefined || rule.ports.some((p) => p.port === port);
    const peerOk = (rule.to ?? []).some((peer) => peer.ipBlock !== undefined && cidrContains(range(peer.ipBlock.cidr), ip) && !(peer.ipBlock.except ?? []).some((e) => cidrContains(range(e), ip)));
    return portOk && peerOk;
  });
}

const configError = (kubernetes: object, profiles?: object): string =>
  configErrorOf({ backend: 'kubernetes', kubernetes, ...(profiles === undefined ? {} : { profiles }) });

describe('tenant NetworkPolicy egress', () => {
  it('DNS goes to the resolver pods picked by namespace AND labels (one peer), and to NodeLocal DNSCache\'s address, on port 53 only', () => {
    const dns = policyOf().spec!.egress![0]!;
    expect(dns.ports).toEqual([{ protocol: 'UDP', port: 53 }, { protocol: 'TCP', port: 53 }]);
    expect(dns.to).toEqual([
      { namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': 'kube-system' } }, podSelector: { matchLabels: { 'k8s-app': 'kube-dns' } } },
      { ipBlock: { cidr: '169.254.20.10/32' } },
    ]);
    expect(admits(policyOf(), '169.254.20.10', 53)).toBe(true);
    expect(admits(policyOf(), '169.254.20.10', 80)).toBe(false);
    expect(admits(policyOf({ dnsAddresses: [] }), '169.254.20.10', 53)).toBe(false);
  });

  it('the resolver\'s namespace, labels and extra addresses come from the settings; an IPv6 address in its canonical form', () => {
    const dns = policyOf({ dnsNamespace: 'dns', dnsPodLabels: { 'app.kubernetes.io/name': 'coredns' }, dnsAddresses: ['FD00::0A', '10.96.0.10'] }).spec!.egress![0]!;
    expect(dns.to).toEqual([
      { namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': 'dns' } }, podSelector: { matchLabels: { 'app.kubernetes.io/name': 'coredns' } } },
      { ipBlock: { cidr: '10.96.0.10/32' } },
      { ipBlock: { cidr: 'fd00::a/128' } },
    ]);
  });

  it('no address berth blocks is reachable in either family: metadata servers, private, loopback, link-local, and their NAT64 forms', () => {
    const np = policyOf();
    const blocked = [
      '169.254.169.254', 'fd00:ec2::254', 'fd20:ce::254', '64:ff9b::a9fe:a9fe', '64:ff9b::169.254.169.254',
      '10.0.0.1', '64:ff9b::a00:1', '172.16.5.4', '192.168.1.1', '100.64.0.1', '127.0.0.1', '64:ff9b::7f00:1',
      '::1', '::', 'fe80::1', 'fd12:3456::1', 'fc00::1', 'fec0::1', '64:ff9b:1::a00:1', '0.0.0.0',
    ];
    for (const address of blocked) for (const port of [53, 80, 443]) expect(admits(np, address, port), `${address}:${port}`).toBe(false);
    for (const address of ['8.8.8.8', '1.1.1.1', '2001:4860:4860::8888', '64:ff9b::808:808']) expect(admits(np, address, 443), address).toBe(true);
  });

  it('every blocked IPv4 range has its NAT64 counterpart among the IPv6 ones', () => {
    for (const v4 of BLOCKED_V4) {
      const r = range(v4);
      const nat64 = BLOCKED_V6.map(range).find((v6) => v6.prefix === 96 + r.prefix && v6.base === ((0x64ff9bn << 96n) | r.base));
      expect(nat64, v4).toBeDefined();
    }
    expect(BLOCKED_V6).toEqual(expect.arrayContaining(['::1/128', 'fc00::/7', 'fe80::/10']));
  });

  it('blockedCidrs add to the blocked ranges of their family', () => {
    const np = policyOf({ blockedCidrs: ['2001:db8::/32', '203.0.113.0/24'] });
    expect(admits(np, '2001:db8::5', 443)).toBe(false);
    expect(admits(np, '203.0.113.9', 443)).toBe(false);
    expect(admits(np, '198.51.100.9', 443)).toBe(true);
    expect(admits(policyOf(), '2001:db8::5', 443)).toBe(true);
  });

  it('validates against the vendored schema with every setting, and network none has no egress at all', () => {
    validator.assertValid(policyOf({ dnsAddresses: ['fd00::a', '10.96.0.10'], blockedCidrs: ['2001:db8::/32'], dnsPodLabels: { 'app.kubernetes.io/name': 'coredns' } }));
    expect(policyOf({ network: 'none' }).spec!.egress).toEqual([]);
  });
});

describe('network settings are checked at start-up', () => {
  it('a bad address or range is an error naming the key, the value and the fix', () => {
    expect(configError({ dnsAddresses: ['169.254.20.300'] })).toContain('config key "kubernetes.dnsAddresses[0]": "169.254.20.300" is not an IPv4 or IPv6 address');
    expect(configError({ dnsAddresses: ['169.254.20.10/32'] })).toContain('is a range; write one address');
    expect(configError({ dnsAddresses: ['::ffff:10.0.0.1'] })).toContain('is an IPv4-mapped IPv6 address, which the API server refuses; write the IPv4 address');
    expect(configError({ blockedCidrs: ['10.1.2.3/8'] })).toContain('config key "kubernetes.blockedCidrs[0]": 10.1.2.3/8 has host bits set; write the network address (10.0.0.0/8)');
    expect(configError({ blockedCidrs: ['::/0'] })).toContain('would block every address; use network: none');
    expect(configError({ blockedCidrs: ['2001:db8::/129'] })).toContain('prefix "/129" is not a number from 0 to 128');
  });

  it('the resolver\'s labels: at least one, each key and value valid', () => {
    expect(configError({ dnsPodLabels: {} })).toContain('config key "kubernetes.dnsPodLabels": needs at least one label');
    expect(configError({ dnsPodLabels: { 'Example.com/app': 'dns' } })).toContain('label key "Example.com/app": its prefix is not a lowercase DNS subdomain');
    expect(configError({ dnsPodLabels: { app: 'kube dns' } })).toContain('label value "kube dns" is not');
    expect(configError({ dnsNamespace: 'Kube_System' })).toContain('config key "kubernetes.dnsNamespace"');
  });

  it('the resolver and the ranges hold for the whole installation: a profile may not set others', () => {
    expect(configError({}, { p: { kubernetes: { dnsAddresses: [] } } })).toContain('config key "profiles.p.kubernetes.dnsAddresses": kubernetes.dnsAddresses holds for the whole installation');
    expect(() => parseConfig({ backend: 'kubernetes', kubernetes: { dnsAddresses: [], blockedCidrs: ['2001:db8::/32'], dnsNamespace: 'dns', dnsPodLabels: { app: 'dns' } } })).not.toThrow();
  });
});

describe('a live NetworkPolicy compared with the one berth writes', () => {
  it('as the API server stores it (empty lists dropped, defaults filled in) it is the same', () => {
    for (const np of [policyOf(), policyOf({ network: 'none' })]) {
      const stored = storedNetworkPolicy(np as unknown as Record<string, unknown>) as unknown as V1NetworkPolicy;
      const live: V1NetworkPolicy = { ...stored, metadata: { ...np.metadata, uid: 'u', resourceVersion: '7', annotations: { other: 'x' } } };
      expect(live.spec).not.toHaveProperty('ingress');
      expect(policyDifferences(live, np)).toEqual([]);
    }
  });

  it('an added ingress rule, a dropped blocked range, a widened DNS peer or a removed policy type is named', () => {
    const want = policyOf();
    const edit = (change: (spec: V1NetworkPolicySpec) => void): string[] => {
      const live = structuredClone(want);
      change(live.spec!);
      return policyDifferences(live, want);
    };
    expect(edit((s) => void (s.ingress = [{}]))).toEqual(['spec.ingress: is [{}], berth writes absent']);
    expect(edit((s) => void s.egress![1]!.to![0]!.ipBlock!.except!.splice(4, 1, '192.0.2.0/24'))).toEqual(['spec.egress[1].to[0].ipBlock.except: lacks ["169.254.0.0/16"] and adds ["192.0.2.0/24"]']);
    expect(edit((s) => void (s.egress![0]!.to![0]!.namespaceSelector = {}))).toEqual([
      'spec.egress[0].to[0].namespaceSelector.matchLabels: is absent, berth writes {"kubernetes.io/metadata.name":"kube-system"}',
    ]);
    expect(edit((s) => void (s.policyTypes = ['Ingress']))).toEqual(['spec.policyTypes: lacks ["Egress"]']);
    expect(edit((s) => void (s.egress![0]!.ports![0]!.protocol = undefined))).toEqual(['spec.egress[0].ports[0].protocol: is "TCP", berth writes "UDP"']);
  });
});
