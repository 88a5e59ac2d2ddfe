import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmodSync, mkdtempSync, realpathSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import type { Sandbox } from '../src/backends/backend.js';
import { DockerBackend } from '../src/backends/docker/docker-backend.js';
import { defaultDocker } from '../src/backends/docker/engine.js';
import { BwrapBackend } from '../src/backends/bwrap/bwrap-backend.js';
import { parseConfig } from '../src/setup/parse-config.js';
import { BENCH_IMAGE, dockerUnavailable } from './engine-check.js';
import { fmt, percentile, verdict } from './stats.js';

/*
 * Snapshot and fork of a sandbox holding 100 MiB (issue: <= 1.2x `docker commit` + create of the
 * same container), and the fork's first command. Part of `npm run bench` (BENCH_ONLY=snapshot).
 *
 * docker: the 100 MiB are in the container's writable layer (where `docker commit` sees them).
 * berth's snapshot = the commit (with its forbidden-value scan of the layer) + copies of the
 * sandbox's own dirs; its create-from = create + start from the image + its dirs put back. The
 * floor: `docker commit` of the same container, then create + start of a container from it with
 * the source's settings as the engine reports them (its network, init, tmpfs, limits): the same
 * container again. (Until 2026-12-04 the floor's container had no network, which left out the
 * ~350 ms a container's start on a bridge network costs here.)
 * bwrap: the 100 MiB in the workspace; the copy is `cp -a --reflink=auto`, timed against a tar pipe.
 */

const ROUNDS = Number(process.env['BENCH_SNAPSHOT_ROUNDS'] ?? 3);
const MIB = 100;
/** The bench measures time, not limits: no snapshot is refused for its size. */
const UNBOUNDED = { maxBytes: Number.MAX_SAFE_INTEGER, limit: 'no limit (bench)' };

async function timed<T>(fn: () => Promise<T>): Promise<[T, number]> {
  const t0 = performance.now();
  const out = await fn();
  return [out, performance.now() - t0];
}

async function run(s: Sandbox, script: string): Promise<string> {
  const r = await s.execOnce(['sh', '-c', script], { timeoutMs: 120_000 });
  if (r.exitCode !== 0) throw new Error(`${script}: ${r.stderr.toString()}`);
  return r.stdout.toString();
}

async function dockerPart(): Promise<void> {
  console.log(`\n# snapshots, docker: snapshot + fork of a sandbox holding ${MIB} MiB (rounds=${ROUNDS})`);
  const why = await dockerUnavailable();
  if (why !== undefined) {
    console.log(`  SKIPPED: ${why}`);
    return;
  }
  const docker = defaultDocker();
  const home = realpathSync(mkdtempSync(join(tmpdir(), 'berth-bench-snap-')));
  const installation = `bench-snap-${randomBytes(4).toString('hex')}`;
  const backend = new DockerBackend({ docker, installation, berthHome: home });
  const section = parseConfig({ backend: 'docker', docker: { image: BENCH_IMAGE } }).base.docker;
  const spec = (key: string) => {
    const digest = randomBytes(32).toString('hex');
    return { identity: { installation, tenant: 'local', profile: 'default', key }, digest, dirName: `b-${digest.slice(0, 12)}`, ephemeral: true, mount: null, rule: 'bench', section };
  };
  const berth: number[] = [];
  const floor: number[] = [];
  const first: number[] = [];
  try {
    const src = await backend.ensure(spec('session:src'), undefined);
    await run(src, `mkdir -p /opt/data && head -c $((${MIB} * 1048576)) /dev/urandom > /opt/data/blob && echo small > /workspace/w.txt`);
    for (let i = 0; i < ROUNDS; i++) {
      const id = `bench-${i}`;
      const [snap, tSnap] = await timed(() => backend.snapshots.create(src, id, [{ name: 'BENCH_TOKEN', value: `never-${randomBytes(8).toString('hex')}` }], UNBOUNDED));
      const [fork, tFrom] = await timed(() => backend.snapshots.createFrom(spec(`session:fork-${i}`), snap.ref, undefined));
      const [, tFirst] = await timed(() => run(fork, 'cat /workspace/w.txt'));
      berth.push(tSnap + tFrom);
      first.push(tFirst);

      // The floor: the same container committed and a container created and started from it with
      // the source's own settings (its network, init, tmpfs dirs, limits: what `docker run` of the
      // same container would be given).
      const like = await docker.getContainer(src.ref).inspect();
      const [made, tFloor] = await timed(async () => {
        const image = await docker.getContainer(src.ref).commit({ pause: true }) as { Id: string };
        const c = await docker.createContainer({
          Image: image.Id, Cmd: like.Config.Cmd, Entrypoint: like.Config.Entrypoint ?? [], User: like.Config.User, Env: like.Config.Env,
          WorkingDir: like.Config.WorkingDir, HostConfig: like.HostConfig,
        });
        await c.start();
        return { c, image };
      });
      floor.push(tFloor);
      await made.c.remove({ force: true });
      await docker.getImage(made.image.Id).remove();
      await backend.remove(fork.ref, fork.hostDir);
      await backend.snapshots.remove(snap.ref);
      console.log(`  round ${i + 1}: berth snapshot ${fmt(tSnap)} + create-from ${fmt(tFrom)}, first command ${fmt(tFirst)}; docker commit + create + start ${fmt(tFloor)}`);
    }
    await backend.remove(src.ref, undefined);
    const [b, f] = [percentile(berth, 50), percentile(floor, 50)];
    console.log(`  berth snapshot + create-from p50 ${fmt(b)}   docker commit + create p50 ${fmt(f)}   ratio ${(b / f).toFixed(2)}x   ${verdict('<= 1.2x', b / f <= 1.2)}`);
    console.log(`  the fork's first command p50 ${fmt(percentile(first, 50))}`);
  } finally {
    // Whatever a failed round left: this installation's containers and snapshots.
    for (const m of await backend.listManaged()) await backend.remove(m.ref, undefined).catch(() => undefined);
    for (const ref of await backend.snapshots.list()) await backend.snapshots.remove(ref).catch(() => undefined);
    await backend.close();
    // The tenant network the backend made (a broker's close removes its own; this bench has none).
    for (const n of await docker.listNetworks({ filters: { label: [`berth.installation=${installation}`] } })) await docker.getNetwork(n.Id).remove().catch(() => undefined);
    rmSync(home, { recursive: true, force: true });
  }
}

async function bwrapPart(): Promise<void> {
  console.log(`\n# snapshots, bwrap: snapshot + fork of a sandbox holding ${MIB} MiB (rounds=${ROUNDS})`);
  // A uid range of its own, away from the bwrap part's and the tests'.
  const range = { first: 1_700_000_000 + Math.floor(Math.random() * 99_000) * 1000, count: 1000 };
  const dir = realpathSync(mkdtempSync(join(tmpdir(), 'berth-bench-snap-bwrap-')));
  chmodSync(dir, 0o711);
  const home = join(dir, 'home');
  const installation = `bench-snap-${randomBytes(4).toString('hex')}`;
  const backend = new BwrapBackend({ berthHome: home, installation });
  const section = parseConfig({ backend: 'bwrap', bwrap: { root: join(dir, 'root'), uids: range } }).base.bwrap;
  const spec = (key: string) => {
    const digest = randomBytes(32).toString('hex');
    return { identity: { installation, tenant: 'local', profile: 'default', key }, digest, dirName: `b-${digest.slice(0, 12)}`, ephemeral: true, mount: null, rule: 'bench', section };
  };
  try {
    await backend.check(section);
    const src = await backend.ensure(spec('session:src'), undefined);
    await run(src, `head -c $((${MIB} * 1048576)) /dev/urandom > /workspace/blob`);
    const total: number[] = [];
    const first: number[] = [];
    for (let i = 0; i < ROUNDS; i++) {
      const [snap, tSnap] = await timed(() => backend.snapshots.create(src, `bench-${i}`, [], UNBOUNDED));
      const [fork, tFrom] = await timed(() => backend.snapshots.createFrom(spec(`session:fork-${i}`), snap.ref, undefined));
      const [, tFirst] = await timed(() => run(fork, 'ls /workspace'));
      total.push(tSnap + tFrom);
      first.push(tFirst);
      await backend.remove(fork.ref, undefined);
      await backend.snapshots.remove(snap.ref);
    }
    // How the copy is made: cp -a --reflink=auto (what berth does) against a tar pipe, same dir.
    const copies: Record<string, number> = {};
    for (const [name, cmd] of [['cp -a --reflink=auto', `cp -a --reflink=auto ${src.ref}/workspace ${dir}/c1`], ['tar | tar', `tar -C ${src.ref} -cf - workspace | (mkdir ${dir}/c2 && tar -C ${dir}/c2 -xf -)`]] as const) {
      const t0 = performance.now();
      execFileSync('sh', ['-c', `${cmd} && sync`]);
      copies[name] = performance.now() - t0;
    }
    await backend.remove(src.ref, undefined);
    console.log(`  berth snapshot + create-from p50 ${fmt(percentile(total, 50))}   the fork's first command p50 ${fmt(percentile(first, 50))}`);
    console.log(`  copying ${MIB} MiB: ${Object.entries(copies).map(([k, v]) => `${k} ${fmt(v)}`).join('   ')}`);
  } catch (err) {
    console.log(`  SKIPPED: ${err instanceof Error ? err.message : String(err)}`);
  } finally {
    await backend.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

export async function snapshotBench(): Promise<void> {
  await dockerPart();
  await bwrapPart();
}
