import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Broker } from '../src/broker/broker.js';
import { defaultDocker } from '../src/backends/docker/engine.js';
import { BENCH_IMAGE as IMAGE, dockerUnavailable } from './engine-check.js';
import { parseConfig } from '../src/setup/parse-config.js';
import { engineMemoryPerSandbox } from './docker.js';
import { MarkerShell } from './marker-shell.js';
import { cpuSnapshot, cpuSpent, gcClock, type CpuSnapshot } from './process-cpu.js';
import { fmt, percentile, verdict } from './stats.js';

/** `BENCH_SESSIONS=1000,2000`: the session counts to hold (each run adds sessions to the previous one's). */
const COUNTS = (process.env['BENCH_SESSIONS'] ?? '1000,2000').split(',').map(Number).filter((n) => n > 0).sort((a, b) => a - b);
/** New sessions started at once while filling up. */
const FILL_CONCURRENCY = 8;
/**
 * Rounds of "all answer one command at once", after a first one. The first after a fill is cold
 * for the floors as much as for berth (4-8x the later rounds, with or without berth: measured on
 * the engine-alone floor), so it is printed apart and the median is of the rounds after it.
 */
const ALL_AT_ONCE_ROUNDS = 5;
/** Pids (processes and threads) one idle docker sandbox holds on the host, measured here: containerd-shim's ~11 threads, tini, the warden, the shell. */
const PIDS_PER_SANDBOX = 16;

/**
 * Open files the engine holds per running sandbox with its shell and warden running, measured here
 * (docker 20.10): 11,101 for 1,001 sandboxes on 2026-12-05, ~11 each: the main process's 3 FIFOs
 * opened twice, the warden's attach socket and 3 of the network (embedded DNS, netlink). The
 * shell's stdio are FIFOs berth holds itself (docs/design.md §5): its exec holds none of the
 * engine's once started (an attached shell exec cost 7 more: ~17-18 a sandbox).
 */
const ENGINE_FDS_PER_SANDBOX = 11;

/** dockerd's soft limit on open files, or undefined when it cannot be read (not root, no such process). */
function dockerdOpenFiles(): number | undefined {
  try {
    const pid = readdirSync('/proc').find((p) => /^\d+$/.test(p) && readFileSync(`/proc/${p}/comm`, 'utf8').trim() === 'dockerd');
    if (pid === undefined) return undefined;
    const line = readFileSync(`/proc/${pid}/limits`, 'utf8').split('\n').find((l) => l.startsWith('Max open files'));
    const soft = Number(line?.split(/\s{2,}/)[1]);
    return Number.isInteger(soft) ? soft : undefined;
  } catch {
    return undefined;
  }
}

/** `BENCH_SCALE_FLOOR=0` skips the engine-only floor (bare containers, no berth) measured before the first count. */
const FLOOR = process.env['BENCH_SCALE_FLOOR'] !== '0';

/** Times `fn` (ms). */
async function timed(fn: () => Promise<unknown>): Promise<number> {
  const t = process.hrtime.bigint();
  await fn();
  return Number(process.hrtime.bigint() - t) / 1e6;
}

/**
 * The first round, then ALL_AT_ONCE_ROUNDS more: their median, and how to print them. `around`
 * runs before and after each round, outside its time (a pass over /proc takes a while).
 */
async function atOnce(
  round: () => Promise<unknown>, around?: { before(): void; after(): void },
): Promise<{ median: number; rounds: number[]; text: string }> {
  const rounds: number[] = [];
  for (let r = 0; r <= ALL_AT_ONCE_ROUNDS; r++) {
    around?.before();
    rounds.push(await timed(round));
    around?.after();
  }
  const median = percentile(rounds.slice(1), 50);
  return { median, rounds, text: `${fmt(median)} (median of the ${ALL_AT_ONCE_ROUNDS} rounds after a first of ${fmt(rounds[0]!)}: ${rounds.slice(1).map(fmt).join(', ')})` };
}

/**
 * The engine alone, the floor of the all-at-once figure: `count` bare containers of the same image
 * (an init and `sleep`, on the default bridge), each with one bash exec attached through the Engine
 * API as berth attaches its shells (stdout and stderr apart, a marker awaited on both), all asked
 * one `echo` at once. The median of the rounds (ms); the containers are removed before it returns.
 */
async function engineOnlyAtOnce(docker: ReturnType<typeof defaultDocker>, count: number): Promise<number> {
  const labels = { 'berth.bench.scale-floor': String(process.pid) };
  const shells: MarkerShell[] = [];
  const ids: string[] = [];
  try {
    const fillMs = await timed(async () => {
      for (let i = 0; i < count; i += FILL_CONCURRENCY) {
        await Promise.all(Array.from({ length: Math.min(FILL_CONCURRENCY, count - i) }, async () => {
          const c = await docker.createContainer({ Image: IMAGE, Cmd: ['sleep', 'infinity'], Labels: labels, HostConfig: { Init: true } });
          ids.push(c.id);
          await c.start();
          const shell = await MarkerShell.attach(docker, c.id, true);
          await shell.run('true');
          shells.push(shell);
        }));
      }
    });
    const { median, text } = await atOnce(() => Promise.all(shells.map((sh, i) => sh.run(`echo ${i}`))));
    console.log(`  floor, the engine alone: ${count} bare containers with a bash exec attached (made in ${(fillMs / 1000).toFixed(1)} s) answer one command at once: ${text}`);
    return median;
  } finally {
    for (const sh of shells) sh.close();
    const t = Date.now();
    const left = await docker.listContainers({ all: true, filters: { label: Object.entries(labels).map(([k, v]) => `${k}=${v}`) } });
    const all = [...new Set([...ids, ...left.map((c) => c.Id)])];
    for (let i = 0; i < all.length; i += FILL_CONCURRENCY) {
      await Promise.all(all.slice(i, i + FILL_CONCURRENCY).map((id) => docker.getContainer(id).remove({ force: true }).catch(() => undefined)));
    }
    console.log(`  (the floor's ${all.length} containers removed in ${((Date.now() - t) / 1000).toFixed(1)} s)`);
  }
}

/**
 * The floor under every engine: `count` bash processes on the host (no container, no engine, no
 * berth), each behind pipes, all asked one `echo` at once by this process. What the kernel, bash
 * and one Node thread cost for that many commands at once on this machine; the median of the
 * rounds (ms).
 */
async function processesAloneAtOnce(count: number): Promise<number> {
  const shells = Array.from({ length: count }, () => MarkerShell.onHost());
  try {
    await Promise.all(shells.map((sh) => sh.run('true')));
    const { median, text } = await atOnce(() => Promise.all(shells.map((sh, i) => sh.run(`echo ${i}`))));
    console.log(`  floor, the processes alone: ${count} bash processes on the host behind pipes (no engine, no berth) answer one command at once: ${text}`);
    return median;
  } finally {
    for (const sh of shells) sh.close();
  }
}

/**
 * Many concurrent idle docker sessions in one berth process (issue 12): the time to create them,
 * berth's heap per session, the engine's memory per sandbox, and the time for all of them to
 * answer one command at once. One tenant, network on: past 1,000 sandboxes (a Linux bridge holds
 * 1,024 ports) they spread over the tenant's shard networks.
 */
export async function scaleBench(): Promise<void> {
  const why = await dockerUnavailable();
  if (why !== undefined) {
    console.log(`\n# scale: SKIPPED (${why})`);
    return;
  }
  const docker = defaultDocker();
  const pidMax = Number(readFileSync('/proc/sys/kernel/pid_max', 'utf8'));
  const needed = COUNTS.at(-1)! * PIDS_PER_SANDBOX;
  if (pidMax < needed) {
    console.log(`\n# scale: SKIPPED: kernel.pid_max is ${pidMax}, and ${COUNTS.at(-1)} sandboxes take about ${needed} pids (each: the engine's shim and its ` +
      `threads, the init, the shell and the warden); raise it first: sysctl -w kernel.pid_max=4194304`);
    return;
  }
  const fdLimit = dockerdOpenFiles();
  const fdsNeeded = COUNTS.at(-1)! * ENGINE_FDS_PER_SANDBOX + 1_000;
  if (fdLimit !== undefined && fdLimit < fdsNeeded) {
    console.log(`\n# scale: SKIPPED: dockerd may hold ${fdLimit} open files, and ${COUNTS.at(-1)} sandboxes need about ${fdsNeeded} (each: ` +
      `~${ENGINE_FDS_PER_SANDBOX} in the engine for its FIFOs and sockets, the warden's attachment included); start dockerd with a higher ` +
      'limit (docker\'s service unit sets LimitNOFILE=infinity; scripts/ensure-docker.sh raises it where it may) or ask for fewer (BENCH_SESSIONS)');
    return;
  }
  console.log(`\n# scale: the floor under any engine, ${COUNTS[0]} bash processes on the host`);
  const processFloor = { count: COUNTS[0]!, ms: await processesAloneAtOnce(COUNTS[0]!) };
  let floor: { count: number; ms: number } | undefined;
  if (FLOOR) {
    console.log(`\n# scale: the floor, ${COUNTS[0]} bare containers without berth (BENCH_SCALE_FLOOR=0 skips it)`);
    floor = { count: COUNTS[0]!, ms: await engineOnlyAtOnce(docker, COUNTS[0]!) };
  }
  const home = mkdtempSync(join(tmpdir(), 'berth-bench-scale-'));
  const broker = await Broker.open({
    config: parseConfig({ backend: 'docker', persistent: false, docker: { image: IMAGE }, limits: { concurrentCalls: 100_000, sandboxes: 1_000_000, memoryMb: 1_000_000_000, diskMb: 1_000_000_000 } }),
    berthHome: home, env: { PATH: process.env['PATH'] }, reap: false,
  });
  const gc = (globalThis as { gc?: () => void }).gc;
  const ids: string[] = [];
  const gcs = gcClock();
  try {
    await broker.exec({ session: 'scale-warm' }, 'true');
    gc?.();
    const heap0 = process.memoryUsage().heapUsed;
    for (const count of COUNTS) {
      console.log(`\n# scale: ${count} concurrent idle docker sessions in one berth process (one tenant, network on)`);
      const fresh = Array.from({ length: count - ids.length }, (_, i) => `scale-${ids.length + i}`);
      const fillMs = await timed(async () => {
        for (let i = 0; i < fresh.length; i += FILL_CONCURRENCY) {
          await Promise.all(fresh.slice(i, i + FILL_CONCURRENCY).map((id) => broker.exec({ session: id }, 'true')));
        }
      });
      ids.push(...fresh);
      gc?.();
      const heapPer = (process.memoryUsage().heapUsed - heap0) / ids.length;
      const mine = broker.list('local').filter((s) => s.sandboxKey.startsWith('session:scale-'));
      const networks = await docker.listNetworks({ filters: { label: [`berth.installation=${broker.installationId}`] } });
      console.log(`  created ${fresh.length} more in ${(fillMs / 1000).toFixed(1)} s (${fmt(fillMs / fresh.length)} each, ${FILL_CONCURRENCY} at a time); ${mine.length} open, on ${networks.length} network shard(s)`);
      console.log(`  engine memory per idle sandbox (median of 20): ${((await engineMemoryPerSandbox(docker, mine.slice(0, 20).map((s) => s.name))) / 1024 / 1024).toFixed(2)} MiB`);
      console.log(`  berth heap per open session: ${(heapPer / 1024).toFixed(0)} KiB after GC${gc ? '' : ' (run with --expose-gc)'}; rss ${(process.memoryUsage().rss / 1024 / 1024).toFixed(0)} MiB`);
      const cpu: Array<{ before: CpuSnapshot; after: CpuSnapshot; gcMs: number }> = [];
      let start: { cpu: CpuSnapshot; gcMs: number } | undefined;
      let wrong = 0;
      const { median: all, rounds, text } = await atOnce(async () => {
        const results = await Promise.all(ids.map((id) => broker.exec({ session: id }, `echo ${id}`)));
        wrong += results.filter((res, i) => res.stdout !== `${ids[i]}\n`).length;
      }, {
        before: () => void (start = { cpu: cpuSnapshot('end'), gcMs: gcs.ms() }),
        after: () => void cpu.push({ before: start!.cpu, after: cpuSnapshot('start'), gcMs: gcs.ms() - start!.gcMs }),
      });
      if (wrong > 0) console.log(`  !! ${wrong} of ${ids.length * rounds.length} answers were wrong`);
      console.log(`  all ${ids.length} answer one command at once: ${text}   ${verdict('< 500 ms', all < 500)}`);
      if (floor?.count === ids.length) console.log(`  berth / the engine alone (the floor above, same count): ${(all / floor.ms).toFixed(2)}x`);
      if (processFloor.count === ids.length) console.log(`  berth / the processes alone (same count): ${(all / processFloor.ms).toFixed(2)}x`);
      // Every round's CPU, the first too.
      rounds.forEach((ms, r) => {
        console.log(`    CPU of round ${r + 1} (${fmt(ms)}; 2 cores give ${(2 * ms / 1000).toFixed(2)} s in it): ${cpuSpent(cpu[r]!.before, cpu[r]!.after)}; ` +
          `garbage collection in berth's process ${fmt(cpu[r]!.gcMs)} of it`);
      });
    }
  } finally {
    gcs.stop();
    const t = Date.now();
    for (let i = 0; i < ids.length; i += 4) await Promise.all(ids.slice(i, i + 4).map((id) => broker.closeSession({ session: id }).catch(() => undefined)));
    await broker.closeSession({ session: 'scale-warm' }).catch(() => undefined);
    await broker.close();
    rmSync(home, { recursive: true, force: true });
    console.log(`  removed ${ids.length} sandboxes in ${((Date.now() - t) / 1000).toFixed(1)} s`);
  }
}
