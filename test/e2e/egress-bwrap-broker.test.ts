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
    hosts = await createEgressHosts();
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
}));
