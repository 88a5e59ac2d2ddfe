import { execFile, execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { readdirSync, readlinkSync } from 'node:fs';
import { connect, type Server, type Socket } from 'node:net';
import { promisify } from 'node:util';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { EGRESS_PROXY_PORT, listenInNetns } from '../../src/egress/netns-listener.js';
import { describeNetns } from '../helpers/netns.js';

/*
 * listenInNetns against real network namespaces (`unshare --net` holding a sleep): a client inside
 * reaches the listener and its socket arrives in this process; the host's namespace does not see
 * the port; the helper that made the listener is gone once it is made.
 */

const run = promisify(execFile);

/** A network namespace of its own, held by a sleeping process, with loopback up. */
interface Holder {
  path: string;
  ns: string;
  proc: ChildProcess;
}

async function holdNamespace(): Promise<Holder> {
  const proc = spawn('unshare', ['--net', 'sleep', '600'], { stdio: 'ignore' });
  const path = `/proc/${proc.pid}/ns/net`;
  const own = readlinkSync('/proc/self/ns/net');
  for (let i = 0; i < 100 && readlinkSync(path) === own; i++) await new Promise((r) => setTimeout(r, 20));
  const ns = readlinkSync(path);
  if (ns === own) throw new Error('unshare --net did not make a namespace');
  execFileSync('nsenter', [`--net=${path}`, 'ip', 'link', 'set', 'lo', 'up']);
  return { path, ns, proc };
}

/** Host pids whose network namespace is `ns`. */
function pidsInNetns(ns: string): number[] {
  const pids: number[] = [];
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      if (readlinkSync(`/proc/${d}/ns/net`) === ns) pids.push(Number(d));
    } catch {
      // Gone meanwhile.
    }
  }
  return pids;
}

/** Runs a bash line inside the namespace (asynchronously: this process must stay free to accept). */
async function inNs(h: Holder, line: string): Promise<string> {
  const { stdout } = await run('nsenter', [`--net=${h.path}`, 'bash', '-c', line], { encoding: 'utf8', timeout: 20_000 });
  return stdout;
}

/** Answers each connection with `hello <n>` and its first line echoed back; `seen` gets each peer's address. */
function answer(server: Server, seen: string[]): void {
  server.on('connection', (s: Socket) => {
    seen.push(String(s.remoteAddress));
    const n = seen.length;
    s.once('data', (d: Buffer) => s.end(`hello ${n} ${d.toString().trim()}\n`));
  });
}

describeNetns('listenInNetns: a listener inside another network namespace, owned by this process', () => {
  let h: Holder;
  let other: Holder;
  beforeAll(async () => {
    h = await holdNamespace();
    other = await holdNamespace();
  });
  afterAll(() => {
    h?.proc.kill('SIGKILL');
    other?.proc.kill('SIGKILL');
  });

  it('a client inside reaches it and its socket arrives here; the host namespace does not see the port; close frees it', async () => {
    const t0 = performance.now();
    const server = await listenInNetns(h.path, { expectNs: h.ns });
    const listenMs = performance.now() - t0;
    console.log(`listenInNetns took ${listenMs.toFixed(0)} ms`);
    const seen: string[] = [];
    answer(server, seen);
    try {
      expect(server.address()).toMatchObject({ address: '127.0.0.1', port: EGRESS_PROXY_PORT });
      const out = await inNs(h, `exec 3<>/dev/tcp/127.0.0.1/${EGRESS_PROXY_PORT}; echo from-inside >&3; cat <&3`);
      expect(out).toBe('hello 1 from-inside\n');
      expect(seen).toHaveLength(1);
      expect(seen).toEqual(['127.0.0.1']);

      // The host's loopback and the other namespace's: whatever answers there (if anything), it is not this listener.
      await new Promise<void>((resolve) => {
        const c = connect(EGRESS_PROXY_PORT, '127.0.0.1');
        c.on('error', () => resolve());
        c.on('connect', () => { c.destroy(); resolve(); });
      });
      await expect(inNs(other, `exec 3<>/dev/tcp/127.0.0.1/${EGRESS_PROXY_PORT}`)).rejects.toThrow(/refused/i);
      expect(seen).toHaveLength(1);

      // Nothing of the helper is left: the namespace holds its sleeping holder alone.
      expect(pidsInNetns(h.ns)).toEqual([h.proc.pid]);
    } finally {
      await new Promise((r) => server.close(r));
    }
    await expect(inNs(h, `exec 3<>/dev/tcp/127.0.0.1/${EGRESS_PROXY_PORT}`)).rejects.toThrow(/refused/i);
    const again = await listenInNetns(h.path);
    await new Promise((r) => again.close(r));
  });

  it('a second listener on the same port in that namespace is refused, naming the port and the namespace', async () => {
    const server = await listenInNetns(h.path);
    try {
      const err = await listenInNetns(h.path).catch((e: unknown) => e);
      expect(err).toMatchObject({ code: 'listen_failed' });
      expect((err as Error).message).toMatch(new RegExp(`^port ${EGRESS_PROXY_PORT} on 127\\.0\\.0\\.1 is taken inside network namespace ${h.path.replace(/\//g, '\\/')} \\(${h.ns.replace(/[[\]]/g, '\\$&')}\\)`));
      // The same port in another namespace is free: each has its own port space.
      const elsewhere = await listenInNetns(other.path);
      await new Promise((r) => elsewhere.close(r));
    } finally {
      await new Promise((r) => server.close(r));
    }
    expect(pidsInNetns(h.ns)).toEqual([h.proc.pid]);
  });

  it('a namespace that is gone, or is not the one expected, is a named error', async () => {
    const gone = spawn('unshare', ['--net', 'true'], { stdio: 'ignore' });
    await new Promise((r) => gone.once('exit', r));
    await expect(listenInNetns(`/proc/${gone.pid}/ns/net`)).rejects.toThrow(`cannot listen in network namespace /proc/${gone.pid}/ns/net: it is gone (the sandbox ended)`);
    await expect(listenInNetns(h.path, { expectNs: other.ns })).rejects.toThrow(`it is ${h.ns}, not the sandbox's ${other.ns} (the sandbox ended and its pid was reused)`);
    await expect(listenInNetns(h.path, { nsenterPath: '/nonexistent/nsenter' })).rejects.toThrow(/nsenter not found \(\/nonexistent\/nsenter\); install util-linux/);
  });

  it('maxConnections bounds the connections open at once', async () => {
    const server = await listenInNetns(h.path, { maxConnections: 1 });
    const held: Socket[] = [];
    server.on('connection', (s: Socket) => held.push(s));
    try {
      // The first stays open (held here); the second is closed by this process as it arrives.
      const out = await inNs(h, [
        `exec 3<>/dev/tcp/127.0.0.1/${EGRESS_PROXY_PORT}`,
        `exec 4<>/dev/tcp/127.0.0.1/${EGRESS_PROXY_PORT}`,
        'timeout 5 cat <&4; echo "second closed: $?"',
      ].join('\n'));
      expect(out).toBe('second closed: 0\n');
      expect(held).toHaveLength(1);
    } finally {
      for (const s of held) s.destroy();
      await new Promise((r) => server.close(r));
    }
  });

  it('connections made while the listener is being handed over all arrive here', async () => {
    // A client inside connects again and again from before the listen until after it; every
    // connection it completes must be answered by this process (none lost with the helper).
    const client = spawn('nsenter', [`--net=${h.path}`, process.execPath, '-e', `
      const net = require('node:net');
      let connected = 0, answered = 0, n = 0, loops = 8;
      // Until 1.5 s after the first connection (the listen may come late on a busy machine), 30 s at most.
      let end = Date.now() + 30000;
      const once = () => {
        if (Date.now() > end) { if (--loops === 0) console.log(JSON.stringify({ connected, answered })); return; }
        const c = net.connect(${EGRESS_PROXY_PORT}, '127.0.0.1');
        let got = '';
        c.on('connect', () => { if (connected++ === 0) end = Math.min(end, Date.now() + 1500); c.write('c' + (n++) + '\\n'); });
        c.on('data', (d) => { got += d; });
        c.on('error', () => {});
        c.on('close', () => { if (got.startsWith('hello')) answered++; setImmediate(once); });
      };
      for (let i = 0; i < 8; i++) once();
    `], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    client.stdout!.setEncoding('utf8').on('data', (d: string) => (out += d));
    await new Promise((r) => setTimeout(r, 300));
    const server = await listenInNetns(h.path);
    const seen: string[] = [];
    answer(server, seen);
    try {
      await new Promise((r) => client.once('exit', r));
      const counts = JSON.parse(out) as { connected: number; answered: number };
      expect(counts.connected).toBeGreaterThan(0);
      expect(counts.answered).toBe(counts.connected);
    } finally {
      await new Promise((r) => server.close(r));
    }
  });
});
