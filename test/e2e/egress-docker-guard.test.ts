import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readlinkSync } from 'node:fs';
import { createServer, type AddressInfo, type Server } from 'node:net';
import { promisify } from 'node:util';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { localLease, SandboxNetworks, type NetworkRef } from '../../src/backends/docker/networks.js';
import { checkDockerGuard, DOCKER_GUARD, installDockerGuard, removeDockerGuard } from '../../src/egress/docker-guard.js';
import { BRIDGE_NAME_OPTION, guardedBridgeName, unguardedNetworks } from '../../src/egress/guarded-bridges.js';
import { checkGuard, installGuard, keepGuard, removeGuard } from '../../src/egress/host-guard.js';
import { iptables } from '../../src/egress/iptables.js';
import { listenInNetns } from '../../src/egress/netns-listener.js';
import { removeInstallationContainers, testInstallation } from '../helpers/docker.js';
import { describeDocker, docker, ensureImage, IMAGE, TestInstall } from '../helpers/docker-e2e.js';
import { parseConfig } from '../../src/setup/parse-config.js';
import { lockHostGuards, privateGuard } from '../helpers/host-guards.js';
import { createTestNet, describeNetns, lastingHostAddresses, type TestNet } from '../helpers/netns.js';

/*
 * The docker host guard with real containers on berth networks, a real dockerd and the host's
 * real packet filter. Every target is first reached from a container on a plain docker network
 * (one the guard does not match: the setup is sound), then refused to berth's, while the
 * "internet" still answers both: the suite fails when the guard is missing and when it blocks
 * everything. The internet is a network namespace behind a veth pair with a public-looking
 * address; the metadata address lives there too, routed by the host, so its refusal is the
 * guard's and not a missing route.
 *
 * berth's docker backend installs the real guard beside sandbox creation and leaves it, so other
 * runs on this machine rely on it: this suite installs it (idempotent) but removes it only if it
 * was not there when the suite began, and tests removal on a private copy (helpers/host-guards.ts).
 */

const run = promisify(execFile);
const METADATA = '169.254.169.254';

/** A TCP server answering every connection with one line; counts them. */
async function lineServer(line: string, listen: (s: Server) => Promise<void>): Promise<{ server: Server; hits: () => number }> {
  let hits = 0;
  const server = createServer((c) => {
    hits++;
    c.on('error', () => undefined);
    c.end(`${line}\n`);
  });
  await listen(server);
  return { server, hits: () => hits };
}

/** What a connection from inside `container` to ip:port reads: the answer's line, or bash's error. */
async function probe(container: string, ip: string, port: number): Promise<string> {
  const { stdout } = await run('docker', ['exec', container, 'timeout', '8', 'bash', '-c', 'exec 3<>"/dev/tcp/$0/$1" && head -n1 <&3', ip, String(port)], { encoding: 'utf8' })
    .catch((e: { stdout?: string; stderr?: string }) => ({ stdout: `${e.stdout ?? ''}${e.stderr ?? ''}` }));
  return stdout.trim();
}

async function startContainer(installation: string, network: string, cmd: string[], extra: object = {}, exposed: Record<string, object> = {}): Promise<string> {
  const c = await docker.createContainer({
    Image: IMAGE,
    Cmd: cmd,
    ExposedPorts: exposed,
    Labels: { 'berth.installation': installation },
    HostConfig: { NetworkMode: network, ...extra },
  });
  await c.start();
  return c.id;
}

async function gatewayOf(network: NetworkRef): Promise<string> {
  const info = await docker.getNetwork(network.id).inspect();
  return String(info.IPAM?.Config?.[0]?.Gateway);
}

/** A container, its network and that network's gateway (an address of the host). */
interface Sandbox {
  net: NetworkRef;
  id: string;
  gateway: string;
}

describeDocker('docker host guard: sandboxes reach the internet, never the host', () => describeNetns('with a routed test network', () => {
  const installation = testInstallation('guard');
  const mine = privateGuard(DOCKER_GUARD, randomBytes(3).toString('hex'));
  let testNet: TestNet;
  let hostSrv: Awaited<ReturnType<typeof lineServer>>;
  const servers: Server[] = [];
  let unlock: (() => void) | undefined;
  let guardWasThere = true;
  let acme: Sandbox;
  let globex: Sandbox;
  let control: Sandbox & { bridge: string };
  let published: { id: string; port: number };
  let internet: string;

  beforeAll(async () => {
    await ensureImage();
    unlock = await lockHostGuards();
    guardWasThere = (await checkDockerGuard()).ok;
    testNet = await createTestNet(1, [METADATA]);
    internet = testNet.addresses[0]!;
    const inNs = (host: string, port: number) => (s: Server) => testNet.listen(host, port).then((h) => new Promise<void>((r) => s.listen(h, r)));
    const inet = await lineServer('internet', inNs(internet, 8080));
    const meta = await lineServer('metadata', inNs(METADATA, 80));
    hostSrv = await lineServer('host', (s) => new Promise((r) => s.listen(0, '0.0.0.0', r)));
    servers.push(inet.server, meta.server, hostSrv.server);

    const networks = new SandboxNetworks({ docker, installation, lease: localLease(), log: () => undefined });
    const join = async (tenant: string) => {
      const { network, release } = await networks.join(tenant);
      try {
        const id = await startContainer(installation, network.name, ['sleep', '600']);
        return { net: network, id, gateway: await gatewayOf(network) };
      } finally {
        release();
      }
    };
    acme = await join('acme');
    globex = await join('globex');
    // The control: a plain docker network (the engine names its bridge br-<id>), not guarded.
    const plain = await docker.createNetwork({ Name: `${installation}-plain`, Driver: 'bridge', Labels: { 'berth.installation': installation } });
    const plainRef = { id: plain.id, name: `${installation}-plain` };
    control = { net: plainRef, id: await startContainer(installation, plainRef.name, ['sleep', '600']), gateway: await gatewayOf(plainRef), bridge: `br-${plain.id.slice(0, 12)}` };
    // A non-berth container publishing a port on the host (docker0, docker-proxy and DNAT).
    const id = await startContainer(installation, 'bridge', ['nc', '-ll', '-p', '80', '-e', 'echo', 'published'], { PortBindings: { '80/tcp': [{ HostPort: '' }] } }, { '80/tcp': {} });
    const ports = (await docker.getContainer(id).inspect()).NetworkSettings.Ports['80/tcp'];
    published = { id, port: Number(ports?.[0]?.HostPort) };
  });

  afterAll(async () => {
    const left = [...await removeGuard(mine), ...(guardWasThere ? [] : await removeDockerGuard())];
    await removeInstallationContainers(docker, installation);
    for (const s of servers) s.close();
    await testNet?.close();
    unlock?.();
    expect(left).toEqual([]);
  });

  it('berth networks get a bridge named with the guarded prefix; a berth network without one is reported', async () => {
    for (const { net } of [acme, globex]) {
      const info = await docker.getNetwork(net.id).inspect();
      expect(info.Options?.[BRIDGE_NAME_OPTION]).toBe(guardedBridgeName(net.name));
      expect(guardedBridgeName(net.name)).toMatch(/^bth[0-9a-f]{12}$/);
      await run('ip', ['link', 'show', guardedBridgeName(net.name)]);
    }
    // As an older berth made them: labelled as berth's, the engine's own br-<id> bridge.
    const old = await docker.createNetwork({ Name: `${installation}-old`, Driver: 'bridge', Labels: { 'berth.managed': 'true', 'berth.installation': installation } });
    const listed = await docker.listNetworks({ filters: { label: [`berth.installation=${installation}`] } });
    expect(unguardedNetworks(listed).sort()).toEqual([`${installation}-old`, `${installation}-plain`]);
    await old.remove();
  });

  it('no host address, no other bridge, no published or DNAT\'d port, no metadata; the internet still answers', async () => {
    const hostPort = (hostSrv.server.address() as AddressInfo).port;
    const hostTargets = [...new Set([acme.gateway, globex.gateway, control.gateway, '172.17.0.1', testNet.hostAddress, ...lastingHostAddresses()])];
    const docker0 = '172.17.0.1';
    // A host port forwarded elsewhere by DNAT, as dockerd does for published ports with
    // `userland-proxy: false`: the packet is forwarded, not the host's input.
    const dnatPort = 40000 + Math.floor(Math.random() * 20000);
    const dnat = (c: Sandbox, bridge: string) => ['PREROUTING', '-i', bridge, '-d', c.gateway, '-p', 'tcp', '--dport', String(dnatPort), '-j', 'DNAT', '--to-destination', `${internet}:8080`];
    const rules = [dnat(control, control.bridge), dnat(acme, guardedBridgeName(acme.net.name))];
    for (const r of rules) expect((await iptables('ipv4', ['-t', 'nat', '-I', ...r])).ok).toBe(true);
    try {
      expect(await installGuard(mine)).toEqual({ enforced: true });
      expect(await installGuard(mine)).toEqual({ enforced: true });
      expect(await checkGuard(mine)).toEqual({ ok: true, missing: [] });
      expect(await installDockerGuard()).toEqual({ enforced: true });
      expect(await checkDockerGuard()).toEqual({ ok: true, missing: [] });

      // The control reaches every target: they are there and routed.
      for (const ip of hostTargets) expect(await probe(control.id, ip, hostPort), `the control to ${ip}`).toBe('host');
      expect(await probe(control.id, METADATA, 80)).toBe('metadata');
      expect(await probe(control.id, docker0, published.port)).toBe('published');
      expect(await probe(control.id, control.gateway, dnatPort)).toBe('internet');
      expect(await probe(control.id, internet, 8080)).toBe('internet');

      const before = hostSrv.hits();
      for (const c of [acme, globex]) {
        for (const ip of hostTargets) expect(await probe(c.id, ip, hostPort), `${ip} from ${c.net.name}`).toMatch(/No route to host/);
        expect(await probe(c.id, METADATA, 80)).toMatch(/No route to host/);
        expect(await probe(c.id, docker0, published.port)).toMatch(/No route to host/);
        expect(await probe(c.id, internet, 8080)).toBe('internet');
      }
      expect(await probe(acme.id, acme.gateway, dnatPort)).toMatch(/No route to host/);
      expect(hostSrv.hits()).toBe(before);
    } finally {
      for (const r of rules) await iptables('ipv4', ['-t', 'nat', '-D', ...r]);
    }
  });

  it('the host still talks to a sandbox: exec, a connection to its address, a listener in its namespace', async () => {
    expect(await installGuard(mine)).toEqual({ enforced: true });
    await run('docker', ['exec', '-d', acme.id, 'nc', '-ll', '-p', '9000', '-e', 'echo', 'from-sandbox']);
    const ip = String((await docker.getContainer(acme.id).inspect()).NetworkSettings.Networks[acme.net.name]?.IPAddress);
    let answer = '';
    for (let i = 0; i < 50 && answer === ''; i++) {
      answer = await new Promise<string>((resolve) => {
        execFile('bash', ['-c', `exec 3<>/dev/tcp/${ip}/9000 && head -n1 <&3`], (_err, out) => resolve(out.trim()));
      });
      if (answer === '') await new Promise((r) => setTimeout(r, 100));
    }
    expect(answer).toBe('from-sandbox');

    const pid = (await docker.getContainer(acme.id).inspect()).State.Pid;
    const server = await listenInNetns(`/proc/${pid}/ns/net`, { expectNs: readlinkSync(`/proc/${pid}/ns/net`) });
    server.on('connection', (s) => s.end('proxy\n'));
    try {
      expect(await probe(acme.id, '127.0.0.1', 3128)).toBe('proxy');
    } finally {
      server.close();
    }
  });

  it('removal takes out the guard\'s chains and every jump to them, and nothing else', async () => {
    const others = async () => {
      const lines: string[] = [];
      for (const family of ['ipv4', 'ipv6'] as const) {
        for (const chain of ['INPUT', 'DOCKER-USER']) lines.push(...(await iptables(family, ['-S', chain])).stdout.split('\n'));
      }
      return lines.filter((l) => !mine.chains.some((c) => l.includes(c.name)));
    };
    expect(await installGuard(mine)).toEqual({ enforced: true });
    const before = await others();
    expect(await removeGuard(mine)).toEqual([]);
    const { stdout: v4 } = await iptables('ipv4', ['-S']);
    const { stdout: v6 } = await iptables('ipv6', ['-S']);
    for (const c of mine.chains) expect(`${v4}${v6}`).not.toContain(c.name);
    expect(await others()).toEqual(before);
    const check = await checkGuard(mine);
    expect(check.ok).toBe(false);
    expect(check.missing).toContain(`iptables -I INPUT 1 -i bth+ -j ${mine.chains[0]!.name}`);
    expect(await removeGuard(mine)).toEqual([]);
  });

  it('a rule removed behind berth\'s back (a firewall reload) is reported by a read and put back by a repair', async () => {
    expect(await installGuard(mine)).toEqual({ enforced: true });
    const jump = ['INPUT', '-i', 'bth+', '-j', mine.chains[0]!.name];
    expect((await iptables('ipv4', ['-D', ...jump])).ok).toBe(true);
    const seen = await keepGuard(mine, false);
    expect(seen).toMatchObject({ enforced: false, restored: [] });
    expect(seen.reason).toContain(`iptables -I INPUT 1 -i bth+ -j ${mine.chains[0]!.name}`);
    expect((await iptables('ipv4', ['-C', ...jump])).ok).toBe(false); // a read changes nothing
    expect(await keepGuard(mine, true)).toEqual({ enforced: true, restored: [`iptables -I INPUT 1 -i bth+ -j ${mine.chains[0]!.name}`] });
    expect(await checkGuard(mine)).toEqual({ ok: true, missing: [] });
    expect(await keepGuard(mine, true)).toEqual({ enforced: true, restored: [] });
    expect(await removeGuard(mine)).toEqual([]);
  });

  it('the broker\'s sweep puts the docker guard back, and the broker says whether it holds', async () => {
    // The real guard: another berth process that starts a docker sandbox meanwhile installs it
    // too, so only what that cannot fake is asserted (the private copy above pins the read).
    const t = new TestInstall('berth-guard-kept-');
    try {
      const broker = await t.open(parseConfig({ backend: 'docker', persistent: false, docker: { image: IMAGE } }), { reap: false });
      const s = { session: 'guarded' };
      expect((await broker.exec(s, 'true')).exitCode).toBe(0);
      expect(await broker.hostGuard(s)).toEqual({ enforced: true });
      expect((await iptables('ipv4', ['-D', 'INPUT', '-i', 'bth+', '-j', 'BERTH-GUARD-INPUT'])).ok).toBe(true);
      await broker.reapers.reapOrphans();
      expect(await checkDockerGuard()).toEqual({ ok: true, missing: [] });
      expect(await broker.hostGuard(s)).toEqual({ enforced: true });
      expect(await broker.hostGuard({ session: 'guarded', profile: 'default' })).toEqual({ enforced: true });
    } finally {
      if (!(await checkDockerGuard()).ok) await installDockerGuard();
      expect(await t.cleanup()).toEqual([]);
    }
  });
}));
