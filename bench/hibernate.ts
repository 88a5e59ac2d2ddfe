import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { PerformanceObserver } from 'node:perf_hooks';
import type Dockerode from 'dockerode';
import { Broker } from '../src/broker/broker.js';
import type { LiveSandboxes } from '../src/broker/live-sandboxes.js';
import type { SandboxRemoval } from '../src/broker/sandbox-removal.js';
import { StartGate } from '../src/broker/start-gate.js';
import { defaultDocker } from '../src/backends/docker/engine.js';
import { mountsUnder } from '../src/backends/docker/mount-table.js';
import { probeBwrap, type BwrapHost } from '../src/backends/bwrap/probe.js';
import { seccompProgram } from '../src/backends/bwrap/seccomp.js';
import { parseConfig } from '../src/setup/parse-config.js';
import { root as bwrapRoot, start as startBareBwrap } from './bwrap.js';
import { MarkerShell } from './marker-shell.js';
import { BENCH_IMAGE as IMAGE, dockerUnavailable } from './engine-check.js';
import { fmt, percentile, row, verdict } from './stats.js';

/*
 * Hibernation (BENCH_ONLY=hibernate): a hibernated sandbox resumed by its next command against a
 * bare start of a stopped container (docker) or of a new bwrap sandbox; density, docker sandboxes
 * mostly hibernated, in steps (BENCH_HIB_STEPS, default 250,1000,2500,5000; BENCH_HIB_MAX stops
 * early; at most BENCH_HIB_LIVE of them live, default 1,000, by limits.liveSandboxes); and a berth process SIGKILLed while it
 * holds BENCH_HIB_CRASH live sandboxes (default 100), then the next broker on its home.
 * BENCH_HIB_PARTS (resume, density, crash; or crash-ephemeral, crash-persistent) picks parts. Alone:
 * BENCH_ONLY=hibernate npm run bench (it builds dist/ first: the crash holder runs the library from there).
 *
 * In the resume part, hibernation is driven through the broker's own removal part (the sweep's
 * hibernate, under the identity's lock: the shells save their state, the sandbox stops), called at
 * once instead of after `hibernateSeconds` of idleness: only the idle wait is skipped. In the
 * density part, the bound on live sandboxes hibernates them, as it would in a bot's burst.
 */

const RESUME_SAMPLES = Number(process.env['BENCH_HIB_N'] ?? 15);
const STEPS = (process.env['BENCH_HIB_STEPS'] ?? '250,1000,2500,5000').split(',').map(Number).filter((n) => n > 0);
const MAX = Number(process.env['BENCH_HIB_MAX'] ?? Infinity);
const LIVE = Number(process.env['BENCH_HIB_LIVE'] ?? 1000);
const CRASH_M = Number(process.env['BENCH_HIB_CRASH'] ?? 100);
const PARTS = new Set((process.env['BENCH_HIB_PARTS'] ?? 'resume,density,crash').split(','));
/** Sandboxes brought up, hibernated or resumed at once by the bench's own loops. */
const AT_ONCE = 8;
const RESUME_TARGET = 1.2;
const BWRAP_RANGE = { first: 1_700_000_000, count: 10_000 };
const PATH = { PATH: process.env['PATH'] };

/** Persistent sandboxes, one per session, that hibernate only when the bench says (the sweep's 10 minutes never come). */
const BENCH_LIMITS = { concurrentCalls: 100_000, sandboxes: 1_000_000, memoryMb: 1_000_000_000, diskMb: 1_000_000_000 };

function hibernatingConfig(extra: Record<string, unknown>) {
  return parseConfig({
    scope: 'session', persistent: true, lifecycle: { idleSeconds: 3600, hibernateSeconds: 600 }, limits: BENCH_LIMITS,
    ...extra,
  });
}

/** Hibernates the live sandboxes of these sessions now, AT_ONCE at a time, through the broker's removal. */
async function hibernateNow(broker: Broker, sessions: string[]): Promise<void> {
  // The broker's own parts (private): what its close takes down holds both.
  const { lives, removal } = (broker as unknown as { parts: { closing: { lives: LiveSandboxes; removal: SandboxRemoval } } }).parts.closing;
  const keys = new Set(sessions.map((s) => `session:${s}`));
  const live = lives.all().filter((l) => keys.has(l.record.key));
  if (live.length !== sessions.length) throw new Error(`${sessions.length - live.length} of ${sessions.length} sandboxes to hibernate are not live`);
  for (let i = 0; i < live.length; i += AT_ONCE) {
    const done = await Promise.all(live.slice(i, i + AT_ONCE).map((l) => removal.hibernate(l, () => Promise.resolve(true))));
    if (done.includes(false)) throw new Error('a sandbox did not hibernate (see the berth:reaper log)');
  }
}

async function timed(fn: () => Promise<unknown>): Promise<number> {
  const t = performance.now();
  await fn();
  return performance.now() - t;
}

/** Runs `fn` for every item, AT_ONCE at a time. */
async function inBatches<T>(items: T[], fn: (item: T) => Promise<unknown>): Promise<void> {
  for (let i = 0; i < items.length; i += AT_ONCE) await Promise.all(items.slice(i, i + AT_ONCE).map(fn));
}

/** Removes every container and network of an installation, whatever state a failed part left them in. */
async function removeInstallation(docker: Dockerode, installation: string): Promise<number> {
  const label = [`berth.installation=${installation}`];
  const containers = await docker.listContainers({ all: true, filters: { label } });
  for (let i = 0; i < containers.length; i += AT_ONCE) {
    await Promise.all(containers.slice(i, i + AT_ONCE).map((c) => docker.getContainer(c.Id).remove({ force: true, v: true }).catch(() => undefined)));
  }
  for (const n of await docker.listNetworks({ filters: { label } })) await docker.getNetwork(n.Id).remove().catch(() => undefined);
  return containers.length;
}

/** Removes a bench's berth home, unmounting first what a failed part left mounted in it (a persistent sandbox's disk). */
async function removeHome(home: string): Promise<void> {
  for (const m of (await mountsUnder(home)).reverse()) {
    try {
      execFileSync('umount', ['-l', '--', m.target]);
    } catch {
      // not ours to unmount, or gone already: the rm below says so
    }
  }
  rmSync(home, { recursive: true, force: true });
}

/** Asserts a resumed result: the command answered and the result says it was resumed. */
function expectResumed(r: Awaited<ReturnType<Broker['exec']>>, what: string): void {
  if (r.exitCode !== 0 || r.sandboxResumed === undefined) throw new Error(`${what}: exit ${r.exitCode}, resumed ${r.sandboxResumed !== undefined}: ${r.output}`);
}

function resumeVerdict(berth: { p50: number; p95: number }, floor: { p50: number; p95: number }): void {
  const ratio = berth.p50 / floor.p50;
  console.log(`  berth resume p50 / floor p50 = ${ratio.toFixed(2)}x ${verdict(`<= ${RESUME_TARGET}x`, ratio <= RESUME_TARGET)}; p95 ${(berth.p95 / floor.p95).toFixed(2)}x; load average ${loadavg().map((l) => l.toFixed(1)).join(' ')}`);
}

/**
 * A hibernated persistent docker sandbox to its first command's answer, against the floor: a
 * stopped container of the same image on the same network (berth's tenant network) started
 * through the Engine API, a bash exec attached, the same first command answered (it reads a file
 * of the container's, as berth's reads the sandbox's). Interleaved.
 */
async function dockerResume(docker: Dockerode): Promise<void> {
  console.log(`\n# hibernate: docker, hibernated sandbox -> first command answered (n=${RESUME_SAMPLES}, interleaved with the floor)`);
  const home = mkdtempSync(join(tmpdir(), 'berth-bench-hib-'));
  const broker = await Broker.open({ config: hibernatingConfig({ backend: 'docker', docker: { image: IMAGE } }), berthHome: home, env: PATH, reap: false });
  let floor: Dockerode.Container | undefined;
  try {
    await broker.exec({ session: 'resume' }, 'echo data > ~/file && export KEEP=1');
    const [network] = await docker.listNetworks({ filters: { label: [`berth.installation=${broker.installationId}`] } });
    if (network === undefined) throw new Error('berth made no tenant network');
    floor = await docker.createContainer({ Image: IMAGE, Cmd: ['sleep', 'infinity'], HostConfig: { Init: true, NetworkMode: network.Id } });
    await floor.start();
    const setup = await MarkerShell.attach(docker, floor.id);
    await setup.run('echo data > ~/file');
    setup.close();
    await floor.stop({ t: 0 });
    const ours: number[] = [];
    const bare: number[] = [];
    const hibernate: number[] = [];
    for (let i = 0; i < RESUME_SAMPLES; i++) {
      hibernate.push(await timed(() => hibernateNow(broker, ['resume'])));
      const t = performance.now();
      const r = await broker.exec({ session: 'resume' }, 'cat ~/file');
      ours.push(performance.now() - t);
      expectResumed(r, 'docker resume');

      const b = performance.now();
      await floor.start();
      const shell = await MarkerShell.attach(docker, floor.id);
      await shell.run('cat ~/file');
      bare.push(performance.now() - b);
      shell.close();
      await floor.stop({ t: 0 });
    }
    row('berth hibernate (shells save state, stop)', hibernate);
    const f = row('floor: API start + bash exec + first command', bare);
    const o = row('berth: hibernated -> first command answered', ours);
    resumeVerdict(o, f);
  } finally {
    await floor?.remove({ force: true }).catch(() => undefined);
    await broker.removeSandboxOf({ session: 'resume' }).catch(() => undefined);
    await broker.close();
    await removeInstallation(docker, broker.installationId);
    await removeHome(home);
  }
}

/**
 * A hibernated persistent bwrap sandbox to its first command's answer, against its own floor: a
 * new bwrap sandbox started from the backend's building blocks and the same first command through
 * its bash (reading a file in its home, as berth's does). Interleaved.
 */
async function bwrapResume(): Promise<void> {
  console.log(`\n# hibernate: bwrap, hibernated sandbox -> first command answered (n=${RESUME_SAMPLES}, interleaved with the floor)`);
  const r = bwrapRoot();
  const home = mkdtempSync(join(tmpdir(), 'berth-bench-hib-bwrap-'));
  const asRoot = process.getuid?.() === 0;
  let host: BwrapHost;
  try {
    host = await probeBwrap({ root: r.root, user: asRoot ? { uid: BWRAP_RANGE.first + BWRAP_RANGE.count - 1, gid: BWRAP_RANGE.first + BWRAP_RANGE.count - 1 } : undefined, seccomp: seccompProgram() });
  } catch (err) {
    console.log(`  SKIPPED: ${err instanceof Error ? err.message : String(err)}`);
    r.cleanup();
    return;
  }
  const broker = await Broker.open({
    config: hibernatingConfig({ backend: 'bwrap', bwrap: { root: r.root, uids: { first: BWRAP_RANGE.first + BWRAP_RANGE.count, count: 1000 }, tmpSizeMb: 64 } }),
    berthHome: home, env: PATH, reap: false,
  });
  try {
    await broker.exec({ session: 'resume' }, 'echo data > ~/file && export KEEP=1');
    const ours: number[] = [];
    const bare: number[] = [];
    for (let i = 0; i < RESUME_SAMPLES; i++) {
      await hibernateNow(broker, ['resume']);
      const t = performance.now();
      const res = await broker.exec({ session: 'resume' }, 'cat ~/file');
      ours.push(performance.now() - t);
      expectResumed(res, 'bwrap resume');

      const b = performance.now();
      const sb = await startBareBwrap(host, r.root, `floor-${i}`, { file: 'data\n' });
      await sb.shell.run('cat ~/file');
      bare.push(performance.now() - b);
      await sb.remove();
    }
    const f = row('floor: new bwrap sandbox, bash, 1st command', bare);
    const o = row('berth: hibernated -> first command answered', ours);
    resumeVerdict(o, f);
  } finally {
    await broker.removeSandboxOf({ session: 'resume' }).catch(() => undefined);
    await broker.close();
    await removeHome(home);
    r.cleanup();
  }
}

/**
 * The engine's memory (bytes): the summed PSS of dockerd, containerd and every containerd-shim, so
 * the pages the shims share (one binary, a thousand processes) count once, not once per shim as
 * their RSS would (14.5 MiB a sandbox at 1,000 by RSS, on 2026-12-06).
 */
function engineMemory(): number {
  let kb = 0;
  for (const pid of readdirSync('/proc')) {
    if (!/^\d+$/.test(pid)) continue;
    try {
      const name = /^Name:\s+(\S+)/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? '';
      if (name !== 'dockerd' && name !== 'containerd' && !name.startsWith('containerd-shim')) continue;
      kb += Number(/^Pss:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/smaps_rollup`, 'utf8'))?.[1] ?? 0);
    } catch {
      // the process ended meanwhile
    }
  }
  return kb * 1024;
}

/**
 * The engine's own cost of a swap at the live count it has now: AT_ONCE lanes, each stopping one
 * running bare container and starting a stopped one (same image, on berth's tenant network) whose
 * bash exec then answers a command, for `rounds` rounds; ms per swap (the rounds' time over the
 * swaps made), as berth's swaps are counted.
 */
async function bareSwapMs(docker: Dockerode, network: string, rounds: number): Promise<number> {
  const made: Dockerode.Container[] = [];
  const make = async (): Promise<Dockerode.Container> => {
    const c = await docker.createContainer({ Image: IMAGE, Cmd: ['sleep', 'infinity'], Labels: { 'berth.bench': 'swap-floor' }, HostConfig: { Init: true, NetworkMode: network } });
    made.push(c);
    return c;
  };
  try {
    // One at a time, each kept for the removal below as it is made: a failed create leaves none behind.
    const lanes: Array<{ up: Dockerode.Container; down: Dockerode.Container }> = [];
    for (let i = 0; i < AT_ONCE; i++) lanes.push({ up: await make(), down: await make() });
    await Promise.all(lanes.map((l) => l.up.start()));
    const ms = await timed(async () => {
      for (let r = 0; r < rounds; r++) {
        await Promise.all(lanes.map(async (l) => {
          await l.up.stop({ t: 0 });
          await l.down.start();
          const shell = await MarkerShell.attach(docker, l.down.id);
          await shell.run('true');
          shell.close();
          [l.up, l.down] = [l.down, l.up];
        }));
      }
    });
    return ms / (rounds * AT_ONCE);
  } finally {
    await Promise.all(made.map((c) => c.remove({ force: true }).catch(() => undefined)));
  }
}

/** Watches this process's GC pauses until `stop`: how many, their sum and the longest. */
function gcPauses(): { stop(): { n: number; totalMs: number; maxMs: number } } {
  const pauses: number[] = [];
  const obs = new PerformanceObserver((list) => {
    for (const e of list.getEntries()) pauses.push(e.duration);
  });
  obs.observe({ entryTypes: ['gc'] });
  return {
    stop: () => {
      obs.disconnect();
      return { n: pauses.length, totalMs: pauses.reduce((a, b) => a + b, 0), maxMs: Math.max(0, ...pauses) };
    },
  };
}

const mib = (bytes: number): string => `${(bytes / 1024 / 1024).toFixed(2)} MiB`;

/**
 * Docker sandboxes in steps, at most LIVE of them live (`limits.liveSandboxes`: bringing one more
 * up hibernates the least recently used): each answers a command, all asked at once (the
 * hibernated ones by resuming, each in place of another that hibernates, through the start gate),
 * berth's RSS and the engine's per sandbox, then the live ones answer at once.
 */
async function density(docker: Dockerode): Promise<void> {
  const home = mkdtempSync(join(tmpdir(), 'berth-bench-hib-density-'));
  const broker = await Broker.open({
    // A burst waits for room as long as a call's timeout: long enough for the engine to turn the whole step over.
    config: hibernatingConfig({ backend: 'docker', docker: { image: IMAGE }, limits: { ...BENCH_LIMITS, liveSandboxes: LIVE }, exec: { timeoutSeconds: 7200 } }),
    berthHome: home, env: PATH, reap: false,
  });
  const gc = (globalThis as { gc?: () => void }).gc;
  const ids: string[] = [];
  const liveCount = async (): Promise<number> => (await broker.listWithState('local')).filter((s) => s.state !== 'hibernated').length;
  try {
    await broker.exec({ session: 'density-warm' }, 'true');
    gc?.();
    const rss0 = process.memoryUsage().rss;
    const engine0 = engineMemory();
    for (const count of STEPS.filter((n) => n <= MAX)) {
      const live = Math.min(LIVE, count);
      console.log(`\n# hibernate: density, ${count} docker sandboxes, at most ${live} live (limits.liveSandboxes ${LIVE})`);
      const fresh = Array.from({ length: count - ids.length }, (_, i) => `d-${ids.length + i}`);
      const fillMs = await timed(() => inBatches(fresh, (s) => broker.exec({ session: s }, 'true')));
      ids.push(...fresh);
      gc?.();
      const rss = process.memoryUsage().rss;
      const engine = engineMemory();
      const up = await liveCount();
      console.log(`  brought up ${fresh.length} more in ${(fillMs / 1000).toFixed(1)} s (${AT_ONCE} at a time); ${up} live, ${ids.length + 1 - up} hibernated`);
      console.log(`  berth RSS ${mib(rss)} (${((rss - rss0) / 1024 / count).toFixed(0)} KiB per sandbox over the start); engine (dockerd + containerd + shims) PSS ${mib(engine)} ` +
        `(${((engine - engine0) / 1024 / count).toFixed(0)} KiB per sandbox over the start)`);
      let wrong = 0;
      let resumed = 0;
      let failed: unknown[] = [];
      const allMs = await timed(async () => {
        const results = await Promise.allSettled(ids.map((s) => broker.exec({ session: s }, `echo ${s}`)));
        failed = results.filter((r) => r.status === 'rejected').map((r) => (r as PromiseRejectedResult).reason);
        const done = results.map((r) => (r.status === 'fulfilled' ? r.value : undefined));
        wrong = done.filter((r, i) => r !== undefined && r.stdout !== `${ids[i]}\n`).length;
        resumed = done.filter((r) => r?.sandboxResumed !== undefined).length;
      });
      console.log(`  every one answers one command (asked at once, ${resumed} by resuming): ${(allMs / 1000).toFixed(1)} s` +
        `${wrong > 0 ? `; !! ${wrong} wrong answers` : ''}${failed.length > 0 ? `; !! ${failed.length} failed, the first: ${String(failed[0])}` : ''}`);
      if (resumed > 0) {
        // Each resume was a swap (one live sandbox hibernated to make room); the engine's bare swap at this live count.
        const [network] = await docker.listNetworks({ filters: { label: [`berth.installation=${broker.installationId}`] } });
        const floor = await bareSwapMs(docker, network!.Id, 3);
        const each = allMs / resumed;
        console.log(`  a swap: berth ${fmt(each)} each (the answers' time over the resumes); engine floor, bare stop + start + bash exec answering ${AT_ONCE} at a time ` +
          `on the same network at this live count: ${fmt(floor)} each; ${(each / floor).toFixed(2)}x`);
      }
      const recent = ids.slice(-live);
      await Promise.all(recent.map((s) => broker.exec({ session: s }, 'true')));
      const rounds: number[] = [];
      const gcs = gcPauses();
      for (let r = 0; r < 5; r++) rounds.push(await timed(() => Promise.all(recent.map((s) => broker.exec({ session: s }, 'true')))));
      const paused = gcs.stop();
      const p50 = percentile(rounds, 50);
      console.log(`  the ${live} live answer one command at once: ${fmt(p50)} (median of 5; ${rounds.map(fmt).join(', ')}) ${verdict('< 500 ms', p50 < 500)}; ` +
        `${await liveCount()} live; load average ${loadavg().map((l) => l.toFixed(1)).join(' ')}`);
      console.log(`    berth's GC in those rounds: ${paused.n} pauses, ${fmt(paused.totalMs)} in all, the longest ${fmt(paused.maxMs)}`);
    }
  } finally {
    const t = performance.now();
    await inBatches([...ids, 'density-warm'], (s) => broker.removeSandboxOf({ session: s }).catch(() => undefined));
    await broker.close();
    const left = await removeInstallation(docker, broker.installationId);
    await removeHome(home);
    console.log(`  removed ${ids.length + 1} sandboxes in ${((performance.now() - t) / 1000).toFixed(1)} s${left > 0 ? ` (${left} left over, removed by label)` : ''}`);
  }
}

/** GET /_ping every 200 ms from a process of its own (berth's event loop is not in its way); its count, failures and slowest answer at the end. */
function engineProbe(): { stop(): Promise<{ n: number; failed: number; maxMs: number }> } {
  const script = `
    const http = require('node:http');
    let n = 0, failed = 0, maxMs = 0;
    const once = () => {
      const t = performance.now();
      const done = (ok) => { maxMs = Math.max(maxMs, performance.now() - t); ok ? n++ : failed++; setTimeout(once, 200); };
      const req = http.get({ socketPath: '/var/run/docker.sock', path: '/_ping', timeout: 10000 }, (res) => { res.resume(); res.on('end', () => done(res.statusCode === 200)); });
      req.on('timeout', () => req.destroy(new Error('timeout')));
      req.on('error', () => done(false));
    };
    once();
    process.stdin.resume();
    process.stdin.on('end', () => { process.stdout.write(JSON.stringify({ n, failed, maxMs })); process.exit(0); });`;
  const child = spawn(process.execPath, ['-e', script], { stdio: ['pipe', 'pipe', 'inherit'] });
  let out = '';
  child.stdout.setEncoding('utf8').on('data', (d: string) => (out += d));
  return {
    stop: () => new Promise((resolve) => {
      child.once('exit', () => resolve(JSON.parse(out) as { n: number; failed: number; maxMs: number }));
      child.stdin.end();
    }),
  };
}

/**
 * Counts the engine requests this process has in flight (every dockerode client dials through
 * docker-modem; a hijacked stream counts until the engine answered the upgrade): the highest count
 * since the last reset, and what was in flight at that moment (method and path, ids left out).
 */
function countEngineCalls(): { peak(): number; atPeak(): string; reset(): void; undo(): void } {
  type Dial = (opts: { method?: string; path?: string }, cb?: (...a: unknown[]) => void) => unknown;
  const modem = createRequire(import.meta.url)('docker-modem') as { prototype: { dial: Dial } };
  const original = modem.prototype.dial;
  const inFlight = new Map<number, string>();
  let next = 0;
  let peak = 0;
  let atPeak: string[] = [];
  modem.prototype.dial = function (this: unknown, opts, cb): unknown {
    const id = next++;
    inFlight.set(id, `${opts.method ?? 'GET'} ${(opts.path ?? '').split('?')[0]!.replace(/[0-9a-f]{12,}/g, ':id').replace(/berth-[\w-]+/g, ':name')}`);
    if (inFlight.size > peak) {
      peak = inFlight.size;
      atPeak = [...inFlight.values()];
    }
    const end = (): void => void inFlight.delete(id);
    if (typeof cb !== 'function') return Promise.resolve(original.call(this, opts)).finally(end);
    return original.call(this, opts, (...a: unknown[]) => {
      end();
      cb(...a);
    });
  };
  const summary = (): string => {
    const counts = new Map<string, number>();
    for (const p of atPeak) counts.set(p, (counts.get(p) ?? 0) + 1);
    return [...counts].sort((a, b) => b[1] - a[1]).map(([p, n]) => `${p} x${n}`).join(', ');
  };
  return { peak: () => peak, atPeak: summary, reset: () => ((peak = inFlight.size), (atPeak = [...inFlight.values()])), undo: () => (modem.prototype.dial = original) };
}

/** Starts the crash holder (bench/crash-holder-process.mjs, the library from dist/) and waits for its M sandboxes; its pid and installation. */
async function startHolder(home: string, config: Record<string, unknown>): Promise<{ pid: number; installation: string; killed: Promise<void> }> {
  const child = spawn(process.execPath, [join(import.meta.dirname, 'crash-holder-process.mjs'), home, JSON.stringify(config), String(CRASH_M)], { stdio: ['ignore', 'pipe', 'inherit'] });
  const killed = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const installation = await new Promise<string>((resolve, reject) => {
    let out = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => {
      out += d;
      const m = /^ready (\S+)$/m.exec(out);
      if (m) resolve(m[1]!);
    });
    child.once('exit', (code) => reject(new Error(`the crash holder exited (${String(code)}) before it was ready`)));
  });
  return { pid: child.pid!, installation, killed };
}

/**
 * A berth process holding CRASH_M live sandboxes is SIGKILLed; the next broker on its home reaps
 * them (ephemeral: its orphan pass) or re-adopts them (persistent: each answers a command in the
 * container it had, all asked at once). The engine is probed throughout, and berth's engine
 * requests in flight are counted.
 */
async function crashRecovery(docker: Dockerode, persistent: boolean): Promise<void> {
  const kind = persistent ? 'persistent, re-adopted' : 'ephemeral, reaped';
  console.log(`\n# hibernate: crash recovery, ${CRASH_M} live ${kind} docker sandboxes, holder SIGKILLed`);
  const home = mkdtempSync(join(tmpdir(), 'berth-bench-hib-crash-'));
  // No sweep of the holder's may stop one before the kill: bringing 1,000 up takes longer than
  // the default 10 minutes of idleness here, and the holder then hibernated the first ones.
  const raw = { backend: 'docker', scope: 'session', persistent, docker: { image: IMAGE }, lifecycle: { idleSeconds: 86_400, hibernateSeconds: 86_400 },
    limits: { concurrentCalls: 100_000, sandboxes: 1_000_000, memoryMb: 1_000_000_000, diskMb: 1_000_000_000 } };
  let installation: string | undefined;
  const calls = countEngineCalls();
  let broker: Broker | undefined;
  try {
    const fillMs = await timed(async () => {
      const holder = await startHolder(home, raw);
      installation = holder.installation;
      process.kill(holder.pid, 'SIGKILL');
      await holder.killed;
    });
    const label = [`berth.installation=${installation}`];
    const before = await docker.listContainers({ filters: { label } });
    console.log(`  holder brought up ${CRASH_M} in ${(fillMs / 1000).toFixed(1)} s and was killed; ${before.length} running containers left` +
      `${before.length < CRASH_M ? ` (!! ${CRASH_M - before.length} were not running at the kill)` : ''}`);
    const probe = engineProbe();
    calls.reset();
    const ms = await timed(async () => {
      broker = await Broker.open({ config: parseConfig(raw), berthHome: home, env: PATH, reap: true });
      if (!persistent) {
        await broker.reapers.reapOrphans();
        return;
      }
      const ids = Array.from({ length: CRASH_M }, (_, i) => `crash-${i}`);
      const results = await Promise.all(ids.map((s) => broker!.exec({ session: s }, 'true')));
      const failed = results.filter((r) => r.exitCode !== 0).length;
      if (failed > 0) throw new Error(`${failed} re-adopted sandboxes did not answer`);
    });
    const p = await probe.stop();
    const after = await docker.listContainers({ all: true, filters: { label } });
    const same = after.filter((c) => before.some((b) => b.Id === c.Id)).length;
    const outcome = persistent ? `${same} of ${before.length} answered in the container they had (${after.length} containers now)` : `${after.length} containers left`;
    console.log(`  next broker: ${persistent ? 're-adopted all' : 'reaped all'} in ${(ms / 1000).toFixed(1)} s; ${outcome}`);
    console.log(`  engine /_ping every 200 ms throughout: ${p.n} answered, ${p.failed} failed, slowest ${fmt(p.maxMs)} ${verdict('no failure, < 1 s', p.failed === 0 && p.maxMs < 1000)}`);
    const width = StartGate.forThisMachine().width;
    console.log(`  berth's engine requests in flight at most ${calls.peak()} (the start gate's width: ${width}) ${verdict(`<= ${width}`, calls.peak() <= width)}; then: ${calls.atPeak()}`);
  } finally {
    calls.undo();
    // A persistent sandbox's disk is released by its removal through berth; the label sweep catches the rest.
    if (persistent && broker !== undefined) await inBatches(Array.from({ length: CRASH_M }, (_, i) => `crash-${i}`), (s) => broker!.removeSandboxOf({ session: s }).catch(() => undefined));
    await broker?.close().catch(() => undefined);
    // A holder that failed before it said its installation left it in its home's state.
    installation ??= await Broker.open({ config: parseConfig(raw), berthHome: home, env: PATH, reap: false })
      .then(async (b) => (await b.close(), b.installationId), () => undefined);
    if (installation !== undefined) await removeInstallation(docker, installation);
    await removeHome(home);
  }
}

export async function hibernateBench(): Promise<void> {
  const why = await dockerUnavailable();
  const docker = defaultDocker();
  if (PARTS.has('resume')) {
    if (why === undefined) await dockerResume(docker);
    else console.log(`\n# hibernate: docker resume SKIPPED (${why})`);
    await bwrapResume();
  }
  if (why !== undefined) {
    console.log(`\n# hibernate: density and crash recovery SKIPPED (${why})`);
    return;
  }
  if (PARTS.has('density')) await density(docker);
  if (PARTS.has('crash') || PARTS.has('crash-ephemeral')) await crashRecovery(docker, false);
  if (PARTS.has('crash') || PARTS.has('crash-persistent')) await crashRecovery(docker, true);
}
