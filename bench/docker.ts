import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import Dockerode from 'dockerode';
import { Broker } from '../src/broker/broker.js';
import { parseConfig } from '../src/setup/parse-config.js';
import { defaultDocker } from '../src/backends/docker/engine.js';
import { NETWORK_OPTIONS } from '../src/backends/docker/networks.js';
import { BENCH_IMAGE as IMAGE, dockerUnavailable } from './engine-check.js';
import { MarkerShell } from './marker-shell.js';
import { fmt, interleaved, percentile, row, verdict, timeMany } from './stats.js';


function dockerCliExec(container: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const c = spawn('docker', ['exec', container, 'sh', '-c', 'true'], { stdio: 'ignore' });
    c.on('error', reject);
    c.on('close', (code) => (code === 0 ? resolve() : reject(new Error(`docker exec exited ${code}`))));
  });
}

/** The median memory the engine counts for these containers (cgroup usage minus page cache), in bytes. */
export async function engineMemoryPerSandbox(docker: Dockerode, names: string[]): Promise<number> {
  const usages: number[] = [];
  for (const name of names) {
    const st = await docker.getContainer(name).stats({ stream: false }) as { memory_stats?: { usage?: number; stats?: { cache?: number; inactive_file?: number } } };
    const m = st.memory_stats;
    if (m?.usage !== undefined) usages.push(m.usage - (m.stats?.inactive_file ?? m.stats?.cache ?? 0));
  }
  return percentile(usages, 50);
}

/**
 * create + start + one exec of the same image through the API, without berth: the floor, on the
 * default bridge or on `network` (a user-defined bridge, like berth's tenant networks).
 */
async function bareCreateStartExec(docker: Dockerode, network?: string): Promise<number> {
  const t = process.hrtime.bigint();
  const c = await docker.createContainer({
    Image: IMAGE, Cmd: ['sleep', 'infinity'], HostConfig: { Init: true, ...(network !== undefined ? { NetworkMode: network } : {}) },
  });
  try {
    await c.start();
    const e = await c.exec({ Cmd: ['true'], AttachStdout: true, AttachStderr: true });
    const stream = await e.start({ hijack: true, stdin: false });
    await new Promise<void>((resolve) => { stream.on('end', resolve); stream.on('close', resolve); stream.resume(); });
    return Number(process.hrtime.bigint() - t) / 1e6;
  } finally {
    await c.remove({ force: true });
  }
}

function openBroker(home: string): Promise<Broker> {
  return Broker.open({
    // The tenant's default quotas (memory: the host's) stop ~11 sandboxes of 2 GiB; the bench holds 100.
    config: parseConfig({ backend: 'docker', persistent: false, docker: { image: IMAGE }, limits: { sandboxes: 1_000_000, memoryMb: 1_000_000_000, diskMb: 1_000_000_000 } }),
    berthHome: home, env: { PATH: process.env['PATH'] },
  });
}

/** Samples of the warm-pool figure: enough for a median, small enough to keep the bench short. */
const WARM_SAMPLES = 20;
/** Issue 12: a new session to its first command from a warm pool, p50. */
const WARM_TARGET_MS = 30;

/**
 * New ephemeral session -> first command result, claimed from a warm pool (the pool is full when
 * each sample starts: its refill runs between samples), against the bare engine create + start +
 * first exec in the same run.
 */
async function warmPoolBench(docker: Dockerode): Promise<void> {
  console.log(`\n# docker: new session -> first command, warm pool (n=${WARM_SAMPLES}, default network: a pool per tenant)`);
  const home = mkdtempSync(join(tmpdir(), 'berth-bench-warm-'));
  const broker = await Broker.open({
    config: parseConfig({ backend: 'docker', persistent: false, warmPool: { size: 2 }, docker: { image: IMAGE } }),
    berthHome: home, env: { PATH: process.env['PATH'] }, warmPool: true,
  });
  try {
    // The tenant's first call fills its pool (a miss); every sample after it is a claim.
    await broker.exec({ session: 'warm-up' }, 'true');
    // One block each: the engine's cleanup after a bare container (its removal, its network
    // endpoint) would otherwise land on the next warm sample.
    const bare: number[] = [];
    for (let i = 0; i < WARM_SAMPLES; i++) bare.push(await bareCreateStartExec(docker));
    const warm: number[] = [];
    for (let i = 0; i < WARM_SAMPLES; i++) {
      await broker.warmPoolsSettled();
      const t = process.hrtime.bigint();
      await broker.exec({ session: `warm-${i}` }, 'true');
      warm.push(Number(process.hrtime.bigint() - t) / 1e6);
      await broker.closeSession({ session: `warm-${i}` });
    }
    const b = row('bare API create+start+exec first command', bare);
    const w = row('berth new session first command, warm pool', warm);
    console.log(`  warm pool p50 ${fmt(w.p50)} (target <= ${WARM_TARGET_MS} ms: ${w.p50 <= WARM_TARGET_MS ? 'met' : 'missed'}); bare floor / warm pool = ${(b.p50 / w.p50).toFixed(1)}x faster (target ~10x); load average ${loadavg().map((l) => l.toFixed(1)).join(' ')}`);
  } finally {
    await broker.closeSession({ session: 'warm-up' }).catch(() => undefined);
    await broker.close();
    rmSync(home, { recursive: true, force: true });
  }
}

export async function dockerBench(): Promise<void> {
  const why = await dockerUnavailable();
  if (why !== undefined) {
    console.log(`\n# docker: SKIPPED (${why})`);
    return;
  }
  const docker = defaultDocker();
  await warmPoolBench(docker);
  if (process.env['BENCH_DOCKER'] === 'warm') return;
  const home = mkdtempSync(join(tmpdir(), 'berth-bench-docker-'));
  const broker = await openBroker(home);
  try {
    console.log('\n# docker: trivial command, same container');
    const session = broker.session({ session: 'bench' });
    await session.exec('true');
    const container = broker.list('local')[0]!.name;
    const floorShell = await MarkerShell.attach(docker, container);
    const floor2Shell = await MarkerShell.attach(docker, container, true);
    const [bareS, bare2S, berthS] = await interleaved(1000, [() => floorShell.run('true'), () => floor2Shell.run('true'), () => session.exec('true')]);
    floorShell.close();
    floor2Shell.close();
    const floor = row('bare bash over an exec attach stream (floor)', bareS!);
    const floor2 = row('bare, marker on stderr then stdout', bare2S!);
    const berth = row('berth docker session exec', berthS!);
    console.log(`  berth p50 / floor p50 = ${(berth.p50 / floor.p50).toFixed(2)}x   ${verdict('<= 1.3x', berth.p50 / floor.p50 <= 1.3)}; against the floor with both markers: ${(berth.p50 / floor2.p50).toFixed(2)}x`);
    const cli = row('docker exec CONTAINER sh -c per command', await timeMany(30, () => dockerCliExec(container), 3));
    console.log(`  berth p50 = ${fmt(berth.p50)} ${verdict('<= 1 ms', berth.p50 <= 1)}; docker exec / berth = ${(cli.p50 / berth.p50).toFixed(0)}x faster ${verdict('>= 50x', cli.p50 / berth.p50 >= 50)}`);

    // berth puts a tenant's sandboxes on a user-defined bridge network of their own (the trust
    // model), which costs the engine more per container than its default bridge: both floors.
    console.log('\n# docker: new ephemeral session, create to first command result (median of 7, the three interleaved)');
    const network = await docker.createNetwork({ Name: `berth-bench-floor-${randomBytes(4).toString('hex')}`, Driver: 'bridge', Options: { ...NETWORK_OPTIONS } });
    const bare: number[] = [];
    const bareNet: number[] = [];
    const ours: number[] = [];
    try {
      for (let i = 0; i < 7; i++) {
        bare.push(await bareCreateStartExec(docker));
        bareNet.push(await bareCreateStartExec(docker, network.id));
        const t = process.hrtime.bigint();
        await broker.exec({ session: `first-${i}` }, 'true');
        ours.push(Number(process.hrtime.bigint() - t) / 1e6);
        await broker.closeSession({ session: `first-${i}` });
      }
    } finally {
      await network.remove().catch(() => undefined);
    }
    const b50 = percentile(bare, 50);
    const n50 = percentile(bareNet, 50);
    const o50 = percentile(ours, 50);
    console.log(`  bare API create+start+exec, default bridge  ${fmt(b50)}`);
    console.log(`  the same on a user-defined bridge network  ${fmt(n50)}   (what a tenant network costs the engine: ${fmt(n50 - b50)})`);
    console.log(`  berth session first command (tenant network) ${fmt(o50)}`);
    console.log(`  berth / bare on the same kind of network = ${(o50 / n50).toFixed(2)}x ${verdict('<= 1.2x', o50 / n50 <= 1.2)}; ` +
      `against the default bridge: ${(o50 / b50).toFixed(2)}x`);

    console.log('\n# docker: 100 idle sessions');
    const gc = (globalThis as { gc?: () => void }).gc;
    gc?.();
    const before = process.memoryUsage();
    const t0 = Date.now();
    const ids = Array.from({ length: 100 }, (_, i) => `idle-${i}`);
    for (let i = 0; i < ids.length; i += 4) {
      await Promise.all(ids.slice(i, i + 4).map((id) => broker.exec({ session: id }, 'true')));
    }
    const totalMs = Date.now() - t0;
    gc?.();
    const after = process.memoryUsage();
    const heapPer = (after.heapUsed - before.heapUsed) / 100;
    const mine = broker.list('local').filter((s) => s.sandboxKey.startsWith('session:idle-'));
    const memoryEach = await engineMemoryPerSandbox(docker, mine.slice(0, 20).map((s) => s.name));
    console.log(`  created ${mine.length} sandboxes in ${(totalMs / 1000).toFixed(1)} s (${(totalMs / 100).toFixed(0)} ms each, 4 at a time)`);
    console.log(`  engine memory per idle sandbox (median of 20, cgroup usage minus page cache): ${(memoryEach / 1024 / 1024).toFixed(2)} MiB`);
    // Heap after a forced GC; an RSS delta over 100 sessions is below the allocator's noise.
    console.log(`  berth process per open session: heap ${(heapPer / 1024).toFixed(0)} KiB after GC${gc ? '' : ' (run with --expose-gc for a stable figure)'}`);
    for (const id of ids) await broker.closeSession({ session: id });
  } finally {
    await broker.closeSession({ session: 'bench' }).catch(() => undefined);
    await broker.close();
    rmSync(home, { recursive: true, force: true });
  }
}
