import { execFile, execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createSocket } from 'node:dgram';
import { createServer, type AddressInfo, type Server } from 'node:net';
import { promisify } from 'node:util';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { hostSystemPaths } from '../../src/backends/bwrap/system-paths.js';
import { bwrapGuard } from '../../src/egress/bwrap-guard.js';
import { checkGuard, installGuard, removeGuard } from '../../src/egress/host-guard.js';
import { iptables } from '../../src/egress/iptables.js';
import { EGRESS_PROXY_PORT, listenInNetns } from '../../src/egress/netns-listener.js';
import { describeBwrap, IS_ROOT, sh, tempRoot, testRange, testSandbox } from '../helpers/bwrap.js';
import { lockHostGuards, privateGuard } from '../helpers/host-guards.js';
import { createTestNet, describeNetns, lastingHostAddresses, type TestNet } from '../helpers/netns.js';

/*
 * bwrap sandboxes and egress, with real sandboxes: one on its own loopback-only network gets a
 * listener of berth's inside its namespace (the allowlist building block), and one on the host's
 * network is kept off every host address, link-local and berth's docker bridges by the owner-match
 * guard, while the "internet" (a test namespace behind a veth) still answers. Each reachability
 * assertion is made without the guard first, so the suite fails if the guard is missing or blocks
 * everything.
 */

const run = promisify(execFile);
const METADATA = '169.254.169.254';
const range = testRange();
/* The guard for this file's uid range, in chains of its own (helpers/host-guards.ts says why). */
const guard = privateGuard(bwrapGuard(range), randomBytes(3).toString('hex'));

/** What a connection from the sandbox to ip:port reads: the answer's line, or bash's error. */
async function probe(sb: Parameters<typeof sh>[0], ip: string, port: number): Promise<string> {
  const r = await sh(sb, `timeout 8 bash -c 'exec 3<>"/dev/tcp/$0/$1" && head -n1 <&3' ${ip} ${port} 2>&1`);
  return r.stdout.trim();
}

function lineServer(line: string): Server {
  return createServer((c) => {
    c.on('error', () => undefined);
    c.end(`${line}\n`);
  });
}

describeBwrap('bwrap sandboxes and egress', (host) => describeNetns('with a routed test network', () => {
  let testNet: TestNet;
  let internet: string;
  const servers: Server[] = [];
  let unlock: (() => void) | undefined;
  let hostPort = 0;
  const id = randomBytes(5).toString('hex');
  const bridge = `bth${id}`;
  const bridgeNs = `berth-bg-${id}`;
  const bridgeTarget = '203.0.113.77';

  beforeAll(async () => {
    if (!IS_ROOT) throw new Error('these tests need root (a uid range and iptables)');
    unlock = await lockHostGuards();
    testNet = await createTestNet(1, [METADATA]);
    internet = testNet.addresses[0]!;
    for (const [line, addr, port] of [['internet', internet, 8080], ['metadata', METADATA, 80]] as const) {
      const s = lineServer(line);
      const handle = await testNet.listen(addr, port);
      await new Promise<void>((r) => s.listen(handle, r));
      servers.push(s);
    }
    const h = lineServer('host');
    // Both families: '::' takes IPv4 too.
    await new Promise<void>((r) => h.listen(0, '::', r));
    hostPort = (h.address() as AddressInfo).port;
    servers.push(h);
    // Stands for a berth docker bridge: a link named like one, with a "sandbox" (a namespace with
    // a server of this process's, listening there through listenInNetns) on its other end.
    const ip = (...args: string[]) => execFileSync('ip', args, { stdio: ['ignore', 'ignore', 'pipe'] });
    ip('netns', 'add', bridgeNs);
    ip('link', 'add', bridge, 'type', 'veth', 'peer', 'name', `bgp${id}`);
    ip('link', 'set', `bgp${id}`, 'netns', bridgeNs);
    ip('-n', bridgeNs, 'addr', 'add', `${bridgeTarget}/32`, 'dev', `bgp${id}`);
    ip('-n', bridgeNs, 'link', 'set', `bgp${id}`, 'up');
    ip('-n', bridgeNs, 'route', 'add', 'default', 'dev', `bgp${id}`);
    ip('link', 'set', bridge, 'up');
    ip('route', 'add', `${bridgeTarget}/32`, 'dev', bridge);
    const sandboxSide = await listenInNetns(`/run/netns/${bridgeNs}`, { host: bridgeTarget, port: 80 });
    sandboxSide.on('connection', (c) => c.end('docker-sandbox\n'));
    servers.push(sandboxSide);
    expect(await removeGuard(guard)).toEqual([]);
  });

  afterAll(async () => {
    const left = await removeGuard(guard);
    for (const s of servers) s.close();
    for (const args of [['link', 'del', bridge], ['netns', 'del', bridgeNs]]) {
      try {
        execFileSync('ip', args, { stdio: 'ignore' });
      } catch {
        // Never made.
      }
    }
    await testNet?.close();
    unlock?.();
    expect(left).toEqual([]);
  });

  it('a sandbox without a network exposes its namespace; a listener of berth\'s inside it takes the sandbox\'s connections', async () => {
    const { sb } = await testSandbox(host, tempRoot(), range, 'netns', { network: 'none', systemPaths: hostSystemPaths() });
    const netns = sb.netns();
    expect(netns?.ns).toMatch(/^net:\[\d+\]$/);
    expect(netns?.ns).not.toBe(execFileSync('readlink', ['/proc/self/ns/net'], { encoding: 'utf8' }).trim());
    const server = await listenInNetns(netns!.path, { expectNs: netns!.ns });
    const peers: string[] = [];
    server.on('connection', (s) => {
      peers.push(String(s.remoteAddress));
      s.end('proxy\n');
    });
    try {
      expect(await probe(sb, '127.0.0.1', EGRESS_PROXY_PORT)).toBe('proxy');
      expect(peers).toEqual(['127.0.0.1']);
      // Loopback is all it has: the host and the internet are out of reach without the proxy.
      expect(await probe(sb, internet, 8080)).toMatch(/Network is unreachable/);
    } finally {
      server.close();
    }
    await sb.stop();
    expect(sb.netns()).toBeUndefined();
  });

  it('on the host network with the guard: no host address, no link-local, no berth bridge; the internet still answers', async () => {
    const { sb } = await testSandbox(host, tempRoot(), range, 'hostnet', { network: 'host', systemPaths: hostSystemPaths() });
    const hostTargets = ['127.0.0.1', testNet.hostAddress, ...lastingHostAddresses()];

    expect((await checkGuard(guard)).ok).toBe(false);
    for (const ip of hostTargets) expect(await probe(sb, ip, hostPort), `without the guard, ${ip}`).toBe('host');
    expect(await probe(sb, '::1', hostPort)).toBe('host');
    expect(await probe(sb, METADATA, 80)).toBe('metadata');
    expect(await probe(sb, bridgeTarget, 80)).toBe('docker-sandbox');
    expect(await probe(sb, internet, 8080)).toBe('internet');

    expect(await installGuard(guard)).toEqual({ enforced: true });
    expect(await installGuard(guard)).toEqual({ enforced: true });
    expect(await checkGuard(guard)).toEqual({ ok: true, missing: [] });
    for (const ip of hostTargets) expect(await probe(sb, ip, hostPort), `${ip}`).toMatch(/No route to host/);
    // IPv6's administratively-prohibited reads as EACCES.
    expect(await probe(sb, '::1', hostPort)).toMatch(/Permission denied/);
    expect(await probe(sb, METADATA, 80)).toMatch(/No route to host/);
    expect(await probe(sb, bridgeTarget, 80)).toMatch(/No route to host/);
    expect(await probe(sb, internet, 8080)).toBe('internet');
    // UDP too, from a detached process in a new session: the owner is the socket's uid, whatever made it.
    const udp = createSocket('udp4');
    let datagrams = 0;
    udp.on('message', () => datagrams++);
    await new Promise<void>((r) => udp.bind(0, '127.0.0.1', r));
    try {
      const port = udp.address().port;
      await sh(sb, `setsid bash -c 'for i in 1 2 3; do echo x > /dev/udp/127.0.0.1/${port}; done' 2>&1; sleep 0.5`);
      expect(datagrams).toBe(0);
    } finally {
      udp.close();
    }
    // The host itself is not confined: only the sandboxes' uids are.
    const { stdout } = await run('bash', ['-c', `exec 3<>/dev/tcp/127.0.0.1/${hostPort} && head -n1 <&3`], { encoding: 'utf8', timeout: 10_000 });
    expect(stdout).toBe('host\n');

    expect(await removeGuard(guard)).toEqual([]);
    const { stdout: v4 } = await iptables('ipv4', ['-S']);
    const { stdout: v6 } = await iptables('ipv6', ['-S']);
    expect(`${v4}${v6}`).not.toContain(guard.chains[0]!.name);
    expect(await probe(sb, '127.0.0.1', hostPort)).toBe('host');
  });
}));
