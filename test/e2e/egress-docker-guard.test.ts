import { execFile } from 'node:child_process';
import { readlinkSync } from 'node:fs';
import { createServer, type AddressInfo, type Server } from 'node:net';
import { networkInterfaces } from 'node:os';
import { promisify } from 'node:util';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { localLease, SandboxNetworks, type NetworkRef } from '../../src/backends/docker/networks.js';
import { checkDockerGuard, installDockerGuard, removeDockerGuard } from '../../src/egress/docker-guard.js';
import { BRIDGE_NAME_OPTION, guardedBridgeName, unguardedNetworks } from '../../src/egress/guarded-bridges.js';
import { iptables } from '../../src/egress/iptables.js';
import { listenInNetns } from '../../src/egress/netns-listener.js';
import { removeInstallationContainers, testInstallation } from '../helpers/docker.js';
import { describeDocker, docker, ensureImage, IMAGE } from '../helpers/docker-e2e.js';
import { lockHostGuards } from '../helpers/host-guard-lock.js';
import { createTestNet, describeNetns, type TestNet } from '../helpers/netns.js';

/*
 * The docker host guard with real containers on berth networks, a real dockerd and the host's
 * real packet filter. Each reachability assertion is made first without the guard (the target
 * answers: the setup is sound) and then with it, so the suite fails both when the guard is missing
 * and when it blocks everything. The "internet" is a network namespace behind a veth pair with a
 * public-looking address; the metadata address lives there too, routed by the host, so its
 * refusal is the guard's and not a missing route.
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

/**
 * The host's IPv4 addresses but loopback, on links that outlive a test (not the test networks,
 * bridges and veths that other runs on this machine make and remove meanwhile).
 */
function lastingHostAddresses(): string[] {
  return Object.entries(networkInterfaces())
    .filter(([name]) => !/^(beg|bth|bgp|br-|veth)/.test(name))
    .flatMap(([, l]) => l ?? [])
    .filter((a) => a.family === 'IPv4' && !a.internal)
    .map((a) => a.address);
}

describeDocker('docker host guard: sandboxes reach the internet, never the host', () => describeNetns('with a routed test network', () => {
  const installation = testInstallation('guard');
  let testNet: TestNet;
  let hostSrv: Awaited<ReturnType<typeof lineServer>>;
  const servers: Server[] = [];
  let unlock: (() => void) | undefined;
  let acme: { net: NetworkRef; id: string; gateway: string };
  let globex: { net: NetworkRef; id: string; gateway: string };
  let published: { id: string; port: number };
  let internet: string;

  beforeAll(async () => {
    await ensureImage();
    unlock = await lockHostGuards();
    expect(await removeDockerGuard()).toEqual([]);
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
    // A non-berth container publishing a port on the host (docker0, docker-proxy and DNAT).
    const id = await startContainer(installation, 'bridge', ['nc', '-ll', '-p', '80', '-e', 'echo', 'published'], { PortBindings: { '80/tcp': [{ HostPort: '' }] } }, { '80/tcp': {} });
    const ports = (await docker.getContainer(id).inspect()).NetworkSettings.Ports['80/tcp'];
    published = { id, port: Number(ports?.[0]?.HostPort) };
  });

  afterAll(async () => {
    const left = await removeDockerGuard();
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
    expect(unguardedNetworks(listed)).toEqual([`${installation}-old`]);
    await old.remove();
  });

  it('with the guard: no host address, no other bridge, no published port, no metadata; the internet still answers', async () => {
    const hostPort = (hostSrv.server.address() as AddressInfo).port;
    const hostTargets = [...new Set([acme.gateway, globex.gateway, '172.17.0.1', testNet.hostAddress, ...lastingHostAddresses()])];
    const gatewayOfPublished = '172.17.0.1';
    // A host port forwarded elsewhere by DNAT, as dockerd does for published ports with
    // `userland-proxy: false`: the packet is forwarded, not the host's input.
    const dnatPort = 40000 + Math.floor(Math.random() * 20000);
    const dnat = ['PREROUTING', '-i', guardedBridgeName(acme.net.name), '-d', acme.gateway, '-p', 'tcp', '--dport', String(dnatPort), '-j', 'DNAT', '--to-destination', `${internet}:8080`];
    expect((await iptables('ipv4', ['-t', 'nat', '-I', ...dnat])).ok).toBe(true);
    try {
      expect(await probe(acme.id, acme.gateway, dnatPort)).toBe('internet');
      await installDockerGuard();
      expect(await probe(acme.id, acme.gateway, dnatPort)).toMatch(/No route to host/);
    } finally {
      await iptables('ipv4', ['-t', 'nat', '-D', ...dnat]);
      await removeDockerGuard();
    }

    // Without the guard each target answers: the test's setup reaches them all.
    expect((await checkDockerGuard()).ok).toBe(false);
    for (const ip of hostTargets) expect(await probe(acme.id, ip, hostPort), `without the guard, ${ip}`).toBe('host');
    expect(await probe(acme.id, METADATA, 80)).toBe('metadata');
    expect(await probe(acme.id, gatewayOfPublished, published.port)).toBe('published');
    expect(await probe(acme.id, internet, 8080)).toBe('internet');

    expect(await installDockerGuard()).toEqual({ enforced: true });
    expect(await installDockerGuard()).toEqual({ enforced: true });
    expect(await checkDockerGuard()).toEqual({ ok: true, missing: [] });
    const before = hostSrv.hits();
    for (const c of [acme, globex]) {
      for (const ip of hostTargets) expect(await probe(c.id, ip, hostPort), `${ip} from ${c.net.name}`).toMatch(/No route to host/);
      expect(await probe(c.id, METADATA, 80)).toMatch(/No route to host/);
      expect(await probe(c.id, gatewayOfPublished, published.port)).toMatch(/No route to host/);
      expect(await probe(c.id, internet, 8080)).toBe('internet');
    }
    expect(hostSrv.hits()).toBe(before);
    // The host itself still reaches the metadata stand-in: its refusal above is the guard's.
    await new Promise<void>((resolve, reject) => {
      execFile('bash', ['-c', `exec 3<>/dev/tcp/${METADATA}/80 && head -n1 <&3`], (err, out) => (err ? reject(err) : (expect(out).toBe('metadata\n'), resolve())));
    });
  });

  it('with the guard the host still talks to a sandbox: exec, a connection to its address, a listener in its namespace', async () => {
    expect(await installDockerGuard()).toEqual({ enforced: true });
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

  it('removal takes out berth\'s chains and jumps and nothing else; what dockerd made stays', async () => {
    expect(await installDockerGuard()).toEqual({ enforced: true });
    const dockerUser = (await iptables('ipv4', ['-S', 'DOCKER-USER'])).stdout;
    expect(await removeDockerGuard()).toEqual([]);
    const { stdout: v4 } = await iptables('ipv4', ['-S']);
    const { stdout: v6 } = await iptables('ipv6', ['-S']);
    expect(`${v4}${v6}`).not.toContain('BERTH-GUARD');
    expect((await iptables('ipv4', ['-S', 'DOCKER-USER'])).stdout).toBe(dockerUser.split('\n').filter((l) => !l.includes('BERTH-GUARD')).join('\n'));
    expect((await checkDockerGuard()).missing).toContain('iptables -I INPUT 1 -i bth+ -j BERTH-GUARD-INPUT');
    expect(await probe(acme.id, acme.gateway, (hostSrv.server.address() as AddressInfo).port)).toBe('host');
    expect(await removeDockerGuard()).toEqual([]);
  });
}));
