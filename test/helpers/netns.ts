import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { linkSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import type { Server } from 'node:net';
import { networkInterfaces } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'vitest';
import { ownerAlive, ownerToken } from '../../src/kit/process-owner.js';

/*
 * Test hosts with public-looking addresses, on this machine: a network namespace joined to the
 * host by a veth pair, with a few addresses of 198.51.100.0/24 (TEST-NET-2) on its side. A child
 * process inside the namespace opens listening sockets there and hands them to the test process
 * (`process.send(msg, server)`), so the test's own servers answer on those addresses. Needs root
 * and iproute2; `describeNetns` skips visibly with the reason, or fails under BERTH_REQUIRE_NETNS=1.
 */

export interface TestNet {
  /** The host's own address on the link (an address of this host, so always denied). */
  hostAddress: string;
  /** Addresses inside the namespace. */
  addresses: string[];
  /** A listening socket on `address:port` inside the namespace, for `server.listen(handle)`. */
  listen(address: string, port: number): Promise<Server>;
  close(): Promise<void>;
}

/** Why test hosts cannot be made here, or undefined when they can. */
export function netnsUnavailable(): string | undefined {
  if (process.getuid?.() !== 0) return 'network namespaces need root';
  try {
    execFileSync('ip', ['netns', 'list'], { stdio: 'ignore' });
  } catch (e) {
    return `iproute2's "ip netns" does not work here (${(e as Error).message.split('\n')[0]})`;
  }
  return undefined;
}

/** `describe` for a suite that needs test hosts: a visible skip with the reason, or a failure under BERTH_REQUIRE_NETNS=1. */
export function describeNetns(name: string, body: () => void): void {
  const why = netnsUnavailable();
  if (why === undefined) {
    describe(name, body);
    return;
  }
  if (process.env['BERTH_REQUIRE_NETNS'] === '1') {
    describe(name, () => it('needs network namespaces (BERTH_REQUIRE_NETNS=1)', () => {
      throw new Error(`BERTH_REQUIRE_NETNS=1 but ${why}`);
    }));
    return;
  }
  console.warn(`skipping ${name}: ${why}`);
  describe.skip(`${name} (skipped: ${why})`, body);
}

const LISTENER = `
const net = require('node:net');
process.on('message', (m) => {
  const s = net.createServer();
  s.on('error', (e) => process.send({ id: m.id, error: e.message }));
  // Once sent, the listening socket is the test's alone: this copy would accept connections too.
  s.listen(m.port, m.host, () => { process.send({ id: m.id }, s, () => s.close()); });
});
process.send({ ready: true });
`;

/** Where test networks claim their /28 (one file per block, naming its owner process, as `ownerToken` writes it, and namespace). */
const CLAIMS = '/run/berth-test-net';

/**
 * Claims a free /28 of 198.51.100.0/24 (16..224) for namespace `ns`: a claim file put in place by
 * link(2), which fails when the name exists, so two test files running at once never take the
 * same block, and a claim is never seen half written. A block whose claimant died (a run killed
 * before its `close`) is taken back by the one process whose rename(2) of the stale claim
 * succeeds: its namespace and host link are removed first, as is a link of a run from before the
 * claims that still holds an address in the block.
 */
function claimBlock(ns: string): { base: number; release(): void } {
  mkdirSync(CLAIMS, { recursive: true });
  const mine = join(CLAIMS, `.${process.pid}-${randomBytes(4).toString('hex')}`);
  writeFileSync(mine, `${ownerToken()} ${ns}\n`);
  try {
    const bases = Array.from({ length: 14 }, (_, i) => 16 * (i + 1)).sort(() => Math.random() - 0.5);
    for (const base of bases) {
      const file = join(CLAIMS, `b${base}`);
      if (!takeStale(file)) continue;
      try {
        linkSync(mine, file);
      } catch {
        continue;
      }
      // A link left by a run from before the claims, with an address in this block: its pair and namespace go.
      for (const [name, list] of Object.entries(networkInterfaces())) {
        const m = /^beg([0-9a-f]{6})h$/.exec(name);
        if (m !== null && (list ?? []).some((a) => a.address === `198.51.100.${base + 1}`)) removeNet(`berth-eg-${m[1]}`);
      }
      return { base, release: () => rmSync(file, { force: true }) };
    }
  } finally {
    rmSync(mine, { force: true });
  }
  throw new Error(`no free test network block: all 14 /28s of 198.51.100.0/24 are claimed by live processes (${CLAIMS})`);
}

/**
 * True when block claim `file` is free to take: none, or one whose claimant died, which this
 * process took back (renamed away first: of two processes finding it stale, one wins).
 */
function takeStale(file: string): boolean {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch {
    return true;
  }
  const [owner, claimedNs] = text.trim().split(' ');
  if (ownerAlive(owner ?? '')) return false;
  const aside = `${file}.stale-${process.pid}-${randomBytes(4).toString('hex')}`;
  try {
    renameSync(file, aside);
  } catch {
    return false;
  }
  // Another process took the stale claim back and made its own between the read and the rename: that one is live, put it back.
  if (readFileSync(aside, 'utf8') !== text) {
    renameSync(aside, file);
    return false;
  }
  removeNet(claimedNs ?? '');
  rmSync(aside, { force: true });
  return true;
}

/** Removes test namespace `ns` and its host link (named after it), whichever still exist. */
function removeNet(ns: string): void {
  const id = /^berth-eg-([0-9a-f]{6})$/.exec(ns)?.[1];
  if (id === undefined) return;
  for (const args of [['link', 'del', `beg${id}h`], ['netns', 'del', ns]]) {
    try {
      execFileSync('ip', args, { stdio: 'ignore' });
    } catch {
      // gone already
    }
  }
}

/**
 * A namespace with `count` addresses (198.51.100.<base+2>...) and the host at <base+1>, on a /28
 * of its own that it claims (`claimBlock`) so parallel runs do not collide. `routed` addresses
 * (e.g. 169.254.169.254) are added inside too, each with a host route to it through the link:
 * hosts the host forwards to, as a router would. Removed by `close` (the routes go with the link).
 */
export async function createTestNet(count = 4, routed: readonly string[] = []): Promise<TestNet> {
  const id = randomBytes(3).toString('hex');
  const ns = `berth-eg-${id}`;
  const hostIf = `beg${id}h`;
  const nsIf = `beg${id}n`;
  const block = claimBlock(ns);
  const base = block.base;
  const hostAddress = `198.51.100.${base + 1}`;
  const addresses = Array.from({ length: count }, (_, i) => `198.51.100.${base + 2 + i}`);
  const ip = (...args: string[]): void => {
    execFileSync('ip', args, { stdio: ['ignore', 'ignore', 'pipe'] });
  };
  let child: ChildProcess | undefined;
  try {
    ip('netns', 'add', ns);
    ip('link', 'add', hostIf, 'type', 'veth', 'peer', 'name', nsIf);
    ip('link', 'set', nsIf, 'netns', ns);
    ip('addr', 'add', `${hostAddress}/28`, 'dev', hostIf);
    ip('link', 'set', hostIf, 'up');
    for (const a of addresses) ip('-n', ns, 'addr', 'add', `${a}/28`, 'dev', nsIf);
    for (const a of routed) ip('-n', ns, 'addr', 'add', `${a}/32`, 'dev', nsIf);
    ip('-n', ns, 'link', 'set', nsIf, 'up');
    ip('-n', ns, 'link', 'set', 'lo', 'up');
    for (const a of routed) ip('route', 'add', `${a}/32`, 'dev', hostIf);
    child = spawn('ip', ['netns', 'exec', ns, process.execPath, '-e', LISTENER], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    await new Promise<void>((resolve, reject) => {
      child!.once('message', () => resolve());
      child!.once('exit', (code) => reject(new Error(`the listener in ${ns} exited (${code})`)));
    });
  } catch (e) {
    child?.kill('SIGKILL');
    removeNet(ns);
    block.release();
    throw e;
  }
  const proc = child;
  let next = 0;
  return {
    hostAddress,
    addresses,
    listen: (address, port) => new Promise((resolve, reject) => {
      const msgId = next++;
      const onMessage = (m: { id?: number; error?: string }, handle: unknown): void => {
        if (m.id !== msgId) return;
        proc.off('message', onMessage);
        if (m.error !== undefined) reject(new Error(`listen ${address}:${port} in ${ns}: ${m.error}`));
        else resolve(handle as Server);
      };
      proc.on('message', onMessage);
      proc.send({ id: msgId, host: address, port });
    }),
    close: async () => {
      proc.kill('SIGKILL');
      await new Promise<void>((resolve) => (proc.exitCode !== null || proc.signalCode !== null ? resolve() : proc.once('exit', () => resolve())));
      removeNet(ns);
      block.release();
    },
  };
}

/**
 * The host's IPv4 addresses but loopback, on links that outlive a test (not the test networks,
 * bridges and veths that other runs on this machine make and remove meanwhile).
 */
export function lastingHostAddresses(): string[] {
  return Object.entries(networkInterfaces())
    .filter(([name]) => !/^(beg|bth|bgp|br-|veth)/.test(name))
    .flatMap(([, l]) => l ?? [])
    .filter((a) => a.family === 'IPv4' && !a.internal)
    .map((a) => a.address);
}
