import { mkdtempSync, rmSync } from 'node:fs';
import { request } from 'node:http';
import { connect, Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { proxyNetworkPolicy, proxyReach, egressCaMapName, withProxyEgress } from '../../src/backends/kubernetes/proxy-egress.js';
import { sandboxPod } from '../../src/backends/kubernetes/manifests.js';
import { KUBERNETES_DEFAULTS } from '../../src/backends/kubernetes/settings.js';
import { parseProxyAddress, type ProxyAddress } from '../../src/egress/proxy-address.js';
import { parseProxyAuthorization, proxyCredential, proxyUrl, tokenMatches } from '../../src/egress/proxy-credential.js';
import { emptyPolicy } from '../../src/egress/policy.js';
import { EgressCa } from '../../src/egress/ca.js';
import { createEgressProxy, type EgressProxy } from '../../src/egress/proxy.js';
import { SharedEgressListener } from '../../src/egress/shared-listener.js';
import type { EgressEvent, EgressSandbox } from '../../src/egress/types.js';
import { Logger } from '../../src/logging/logger.js';
import { sandboxInput } from '../k8s-standin/fixtures.js';
import { loadValidator } from '../schemas/validate.js';
import { configProblem } from '../helpers/config-problem.js';

/*
 * Egress on kubernetes, the pure parts: the start-up rules, the proxy credential and address,
 * and the NetworkPolicy and pod berth writes for an allowlist pod (validated against the vendored
 * schemas). The traffic itself: test/e2e/egress-kubernetes.test.ts.
 */

const allowlist = { mode: 'allowlist', allow: ['api.github.com'] };
const proxy = { listen: '10.0.0.5:3128', advertise: '10.0.0.5:3128' };
const address = (text: string): ProxyAddress => parseProxyAddress(text) as ProxyAddress;

describe('egress on kubernetes: start-up rules', () => {
  it('allowlist and credentials parse with egressProxy.listen and advertise', () => {
    expect(configProblem({ backend: 'kubernetes', egress: allowlist, egressProxy: proxy, credentials: { T: { hosts: ['api.github.com'] } } })).toBe('');
    expect(configProblem({ backend: 'kubernetes', egress: { mode: 'none' } })).toBe('');
  });

  it('allowlist or credentials on kubernetes without the shared listener is an error naming both keys', () => {
    expect(configProblem({ backend: 'kubernetes', egress: allowlist }))
      .toMatch(/config key "egress\.mode": backend "kubernetes" .* set egressProxy\.listen .* and egressProxy\.advertise/);
    expect(configProblem({ profiles: { bot: { backend: 'kubernetes', egress: allowlist } } })).toMatch(/config key "profiles\.bot\.egress\.mode"/);
  });

  it('listen without advertise (or the reverse), and an address that is a name, are errors', () => {
    expect(configProblem({ egressProxy: { listen: '10.0.0.5:3128' } })).toMatch(/"egressProxy\.listen" is set and egressProxy\.advertise is not/);
    expect(configProblem({ egressProxy: { listen: '0.0.0.0:3128', advertise: 'berth.berth.svc:3128' } })).toMatch(/egressProxy\.advertise.*must be an IP address and a port/);
    expect(configProblem({ egressProxy: { listen: '[fd00::5]:3128', advertise: 'fd00::5:3128' } })).toMatch(/egressProxy\.advertise.*must be an IP address and a port/);
  });

  it('what berth\'s NetworkPolicy cannot give is an error: no policy, a warm pool, agent-sandbox mode, credentials in open mode', () => {
    expect(configProblem({ backend: 'kubernetes', egress: allowlist, egressProxy: proxy, kubernetes: { networkPolicy: false } })).toMatch(/"kubernetes\.networkPolicy": false, and egress mode allowlist/);
    expect(configProblem({ backend: 'kubernetes', egress: { mode: 'none' }, kubernetes: { networkPolicy: false } })).toMatch(/"kubernetes\.networkPolicy": false, and egress mode none/);
    expect(configProblem({ backend: 'kubernetes', egress: allowlist, egressProxy: proxy, kubernetes: { mode: 'agent-sandbox' } })).toMatch(/"kubernetes\.mode": .*mode pods only/);
    expect(configProblem({ backend: 'kubernetes', egressProxy: proxy, credentials: { T: { hosts: ['api.github.com'] } } })).toMatch(/credentials on kubernetes need egress mode allowlist/);
    expect(configProblem({ backend: 'kubernetes', egress: { mode: 'none' }, persistent: false, kubernetes: { mode: 'agent-sandbox', warmPool: 'p' } })).toMatch(/"kubernetes\.warmPool": .*egress mode none cannot be guaranteed/);
  });
});

describe('egress on kubernetes: the proxy credential', () => {
  const secret = Buffer.alloc(32, 7);
  const a = 'a'.repeat(64);
  const b = 'b'.repeat(64);

  it('is derived from the sandbox digest under the secret: stable, distinct per sandbox and per secret', () => {
    expect(proxyCredential(secret, a)).toEqual(proxyCredential(secret, a));
    expect(proxyCredential(secret, a).user).toBe(`s${'a'.repeat(32)}`);
    expect(proxyCredential(secret, a).token).toMatch(/^[0-9a-f]{32}$/);
    expect(proxyCredential(secret, a).token).not.toBe(proxyCredential(secret, b).token);
    expect(proxyCredential(secret, a).token).not.toBe(proxyCredential(Buffer.alloc(32, 8), a).token);
  });

  it('travels as Basic user:token in Proxy-Authorization, and only that shape is read', () => {
    const c = proxyCredential(secret, a);
    const url = new URL(proxyUrl(c, '[fd00::5]:3128'));
    expect([url.username, url.password, url.host]).toEqual([c.user, c.token, '[fd00::5]:3128']);
    const header = `Basic ${Buffer.from(`${c.user}:${c.token}`).toString('base64')}`;
    expect(parseProxyAuthorization(header)).toEqual({ user: c.user, password: c.token });
    expect(parseProxyAuthorization(undefined)).toBeUndefined();
    expect(parseProxyAuthorization(`Bearer ${c.token}`)).toBeUndefined();
    expect(parseProxyAuthorization(`Basic ${Buffer.from('no-colon').toString('base64')}`)).toBeUndefined();
    expect(tokenMatches(c.token, c.token)).toBe(true);
    expect(tokenMatches(c.token.slice(0, -1), c.token)).toBe(false);
    expect(tokenMatches(`${c.token.slice(0, -1)}x`, c.token)).toBe(false);
  });
});

describe('egress on kubernetes: the allowlist pod and its NetworkPolicy', () => {
  const validator = loadValidator();

  it('admits TCP to the proxy address alone (/32 or /128), no DNS, no ingress, and validates', () => {
    for (const [text, cidr] of [['10.0.0.5:3128', '10.0.0.5/32'], ['[fd00::5]:8443', 'fd00::5/128']] as const) {
      const p = address(text);
      const policy = proxyNetworkPolicy('inst-1', 'acme', KUBERNETES_DEFAULTS, p);
      validator.assertValid(policy);
      expect(policy.spec!.ingress).toEqual([]);
      expect(policy.spec!.egress).toEqual([{ to: [{ ipBlock: { cidr } }], ports: [{ protocol: 'TCP', port: p.port }] }]);
      expect(policy.spec!.podSelector!.matchLabels!['berth.dev/network']).toBe(proxyReach(p));
    }
  });

  it("with proxyPods (berth in the cluster behind a Service), admits berth's pods (namespace AND labels) on their port instead of the address, and validates", () => {
    const p = address('10.96.0.40:3128');
    const pods = { namespace: 'berth-system', labels: { 'app.kubernetes.io/name': 'berth' }, port: 8443 };
    const k = { ...KUBERNETES_DEFAULTS, proxyPods: pods };
    const policy = proxyNetworkPolicy('inst-1', 'acme', k, p);
    validator.assertValid(policy);
    expect(policy.spec!.egress).toEqual([{
      to: [{ namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': 'berth-system' } }, podSelector: { matchLabels: { 'app.kubernetes.io/name': 'berth' } } }],
      ports: [{ protocol: 'TCP', port: 8443 }],
    }]);
    expect(JSON.stringify(policy)).not.toMatch(/ipBlock/);
    // Without a port of their own, berth's pods listen on the advertised one; another peer is another reach.
    expect(proxyNetworkPolicy('inst-1', 'acme', { ...k, proxyPods: { ...pods, port: undefined } }, p).spec!.egress![0]!.ports).toEqual([{ protocol: 'TCP', port: 3128 }]);
    expect(proxyReach(p, pods)).not.toBe(proxyReach(p));
    expect(proxyReach(p, pods)).not.toBe(proxyReach(p, { ...pods, labels: { 'app.kubernetes.io/name': 'other' } }));
    expect(policy.spec!.podSelector!.matchLabels!['berth.dev/network']).toBe(proxyReach(p, pods));
    expect(withProxyEgress(sandboxPod(sandboxInput('inst-1', { ephemeral: true })), p, pods).metadata!.labels!['berth.dev/network']).toBe(proxyReach(p, pods));
  });

  it('proxyPods needs a namespace and at least one valid label; its port is a TCP port', () => {
    const base = { backend: 'kubernetes', egress: allowlist, egressProxy: proxy };
    expect(configProblem({ ...base, kubernetes: { proxyPods: { namespace: 'berth', labels: { app: 'berth' } } } })).toBe('');
    expect(configProblem({ ...base, kubernetes: { proxyPods: { namespace: 'berth', labels: {} } } })).toMatch(/kubernetes\.proxyPods\.labels.*at least one label: an empty selector would admit the sandboxes' traffic to every pod/);
    expect(configProblem({ ...base, kubernetes: { proxyPods: { labels: { app: 'berth' } } } })).toMatch(/kubernetes\.proxyPods\.namespace/);
    expect(configProblem({ ...base, kubernetes: { proxyPods: { namespace: 'berth', labels: { app: 'berth' }, port: 70000 } } })).toMatch(/kubernetes\.proxyPods\.port": expected an integer between 1 and 65535, got 70000/);
    expect(configProblem({ ...base, kubernetes: { proxyPods: { namespace: 'berth', labels: { app: 'berth' }, extra: 1 } } })).toMatch(/kubernetes\.proxyPods.*extra/);
  });

  it('a new proxy address is a new reach (a new policy); the pod carries the reach and mounts the CA read-only, and validates', () => {
    expect(proxyReach(address('10.0.0.5:3128'))).not.toBe(proxyReach(address('10.0.0.6:3128')));
    const input = sandboxInput('inst-1', { ephemeral: true });
    const pod = withProxyEgress(sandboxPod(input), address('10.0.0.5:3128'));
    const caMap = egressCaMapName(pod.metadata!.name!);
    validator.assertValid(pod);
    expect(pod.metadata!.labels!['berth.dev/network']).toBe(proxyReach(address('10.0.0.5:3128')));
    expect(pod.spec!.containers[0]!.volumeMounts!.at(-1)).toEqual({ name: 'berth-egress-ca', mountPath: '/etc/berth-egress', readOnly: true });
    expect(pod.spec!.volumes!.at(-1)).toEqual({ name: 'berth-egress-ca', configMap: { name: caMap, defaultMode: 0o444 } });
    expect(caMap).toBe(`${pod.metadata!.name!}-egress-ca`);
  });
});

describe('egress on kubernetes: the shared listener\'s gate', () => {
  const secret = Buffer.alloc(32, 9);
  const sandboxOf = (key: string): EgressSandbox => ({
    identity: { tenant: 'local', profile: 'default', sandboxKey: key }, policy: emptyPolicy('allowlist'), credentials: [], onDecision: () => undefined,
  });
  const basic = (user: string, token: string): string => `Basic ${Buffer.from(`${user}:${token}`).toString('base64')}`;

  it('a sandbox gets only its own context; another sandbox\'s token, or a removed sandbox\'s, is refused', async () => {
    const gate = await SharedEgressListener.start({ handleGated: () => undefined } as unknown as EgressProxy, { host: '127.0.0.1', port: 0, maxConnectionsPerSandbox: 64, log: Logger.silent() });
    try {
      const [a, b] = [sandboxOf('a'), sandboxOf('b')];
      const [ca, cb] = [proxyCredential(secret, 'a'.repeat(64)), proxyCredential(secret, 'b'.repeat(64))];
      gate.register('ref-a', ca, a);
      gate.register('ref-b', cb, b);
      expect(gate.authenticate(basic(ca.user, ca.token))).toEqual({ sandbox: a });
      expect(gate.authenticate(basic(cb.user, cb.token))).toEqual({ sandbox: b });
      // B's own token under A's name: refused, and reported to A (whose name was used).
      expect(gate.authenticate(basic(ca.user, cb.token))).toEqual({ refused: 'a wrong proxy token for this sandbox', claimed: a });
      expect(gate.authenticate(undefined)).toEqual({ refused: 'no proxy credential (Proxy-Authorization)' });
      expect(gate.unregister('ref-a')).toBe(a);
      expect(gate.authenticate(basic(ca.user, ca.token))).toEqual({ refused: 'a proxy credential of no sandbox berth serves' });
      expect(gate.size).toBe(1);
    } finally {
      await gate.close();
    }
  });

  it('holds each authenticated sandbox to maxConnectionsPerSandbox open connections: one more is refused until one closes, another sandbox is not affected', async () => {
    const gate = await SharedEgressListener.start({ handleGated: () => undefined } as unknown as EgressProxy, { host: '127.0.0.1', port: 0, maxConnectionsPerSandbox: 2, log: Logger.silent() });
    try {
      const [a, b] = [sandboxOf('a'), sandboxOf('b')];
      const [ca, cb] = [proxyCredential(secret, 'a'.repeat(64)), proxyCredential(secret, 'b'.repeat(64))];
      gate.register('ref-a', ca, a);
      gate.register('ref-b', cb, b);
      const sockets = Array.from({ length: 4 }, () => new Socket());
      expect(gate.authenticate(basic(ca.user, ca.token), sockets[0])).toEqual({ sandbox: a });
      expect(gate.authenticate(basic(ca.user, ca.token), sockets[1])).toEqual({ sandbox: a });
      expect(gate.authenticate(basic(ca.user, ca.token), sockets[2])).toEqual({ full: a });
      expect(gate.authenticate(basic(cb.user, cb.token), sockets[3])).toEqual({ sandbox: b });
      sockets[0]!.emit('close', false);
      expect(gate.authenticate(basic(ca.user, ca.token), sockets[2])).toEqual({ sandbox: a });
    } finally {
      await gate.close();
    }
  });

  it('wrong tokens under a sandbox\'s user are audited once (no host of the sender\'s), the rest counted into the record made when the sandbox goes', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'berth-k8s-egress-'));
    const proxy = createEgressProxy({ ca: await EgressCa.open(join(dir, 'egress')) });
    const gate = await SharedEgressListener.start(proxy, { host: '127.0.0.1', port: 0, maxConnectionsPerSandbox: 8, log: Logger.silent() });
    try {
      const events: EgressEvent[] = [];
      const a: EgressSandbox = { ...sandboxOf('a'), onDecision: (e) => events.push(e) };
      const ca = proxyCredential(secret, 'a'.repeat(64));
      gate.register('ref-a', ca, a);
      const status = (host: string): Promise<number | undefined> => new Promise((resolve, reject) => {
        const req = request({ host: '127.0.0.1', port: gate.port, path: `http://${host}/`, headers: { host, 'proxy-authorization': basic(ca.user, 'wrong') }, agent: false }, (res) => {
          res.resume();
          resolve(res.statusCode);
        });
        req.on('error', reject);
        req.end();
      });
      expect([await status('one.example'), await status('two.example'), await status('three.example')]).toEqual([407, 407, 407]);
      expect(events.map((e) => [e.rule, e.status, e.host, e.port, e.detail])).toEqual([['proxy auth', 407, '?', 0, 'a wrong proxy token for this sandbox']]);
      proxy.release(gate.unregister('ref-a')!);
      expect(events.map((e) => [e.host, e.detail])).toEqual([
        ['?', 'a wrong proxy token for this sandbox'],
        ['?', '2 more refused with 407 since the last such entry, not recorded one by one'],
      ]);
    } finally {
      await gate.close();
      await proxy.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('admits at most maxConnectionsPerSandbox connections per sandbox it serves, plus one share not yet named; one source address holds at most one share unnamed', async () => {
    const held: Socket[] = [];
    const gate = await SharedEgressListener.start({ handleGated: (s: Socket) => held.push(s) } as unknown as EgressProxy, { host: '127.0.0.1', port: 0, maxConnectionsPerSandbox: 2, log: Logger.silent() });
    /** Opens `n` connections at once from each of `sources`; how many the listener kept (a refused one is closed at once). */
    const kept = async (n: number, sources: readonly string[] = ['127.0.0.1']): Promise<number> => {
      const before = held.length;
      const clients = await Promise.all(sources.flatMap((localAddress) => Array.from({ length: n }, () => new Promise<Socket>((resolve) => {
        const c = connect({ port: gate.port, host: '127.0.0.1', localAddress }, () => resolve(c));
        c.on('error', () => undefined);
      }))));
      await new Promise((r) => setTimeout(r, 200));
      const count = held.length - before;
      for (const c of clients) c.destroy();
      for (const s of held.splice(0)) s.destroy();
      await new Promise((r) => setTimeout(r, 100));
      return count;
    };
    try {
      expect(await kept(5)).toBe(2);
      const a = sandboxOf('a');
      gate.register('ref-a', proxyCredential(secret, 'a'.repeat(64)), a);
      // One address that never sends a credential keeps its one share, not the listener's bound.
      expect(await kept(5)).toBe(2);
      expect(await kept(5, ['127.0.0.2', '127.0.0.3', '127.0.0.4'])).toBe(4);
      // A connection its credential named counts against its sandbox, no longer as unnamed.
      const ca = proxyCredential(secret, 'a'.repeat(64));
      const open = (): Promise<Socket> => new Promise((resolve) => {
        const c = connect({ port: gate.port, host: '127.0.0.1', localAddress: '127.0.0.5' }, () => resolve(c));
        c.on('error', () => undefined);
      });
      const clients = [await open(), await open()];
      try {
        await new Promise((r) => setTimeout(r, 100));
        expect(held).toHaveLength(2);
        expect(gate.authenticate(basic(ca.user, ca.token), held[0])).toEqual({ sandbox: a });
        clients.push(await open());
        await new Promise((r) => setTimeout(r, 100));
        expect(held).toHaveLength(3);
      } finally {
        for (const c of clients) c.destroy();
        for (const x of held.splice(0)) x.destroy();
      }
      await new Promise((r) => setTimeout(r, 100));
      gate.unregister('ref-a');
      expect(await kept(5, ['127.0.0.2', '127.0.0.3'])).toBe(2);
    } finally {
      await gate.close();
    }
  });
});
