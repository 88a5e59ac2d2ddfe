import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmodSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Readable, Writable } from 'node:stream';
import { placeSandbox, removeSandbox } from '../src/backends/bwrap/placement.js';
import { probeBwrap, type BwrapHost } from '../src/backends/bwrap/probe.js';
import { startSandbox, type BwrapSandbox } from '../src/backends/bwrap/sandbox.js';
import { prepareRoot } from '../src/backends/bwrap/sandbox-dirs.js';
import { seccompProgram } from '../src/backends/bwrap/seccomp.js';
import { Broker } from '../src/broker/broker.js';
import { parseConfig } from '../src/setup/parse-config.js';
import { RawShell } from './raw-shell.js';
import { fmt, percentile, row, verdict, timeMany } from './stats.js';

/*
 * The bwrap backend (issue 11): a new sandbox to its first command and one command through its
 * persistent bash, both through berth (the library, backend: bwrap) and through the building
 * blocks alone, against a bare persistent bash on the host; and the memory of idle sandboxes
 * (each with one idle persistent bash; BENCH_BWRAP_IDLE, default 200). Part of `npm run bench`
 * (BENCH_ONLY=bwrap); alone: node --expose-gc --import tsx bench/bwrap.ts
 */

const PATH = { PATH: '/usr/local/bin:/usr/bin:/bin' };
const RANGE = { first: 1_600_000_000, count: 10_000 };
const IS_ROOT = process.getuid?.() === 0;
const N_EXEC = Number(process.env['BENCH_N'] ?? 2000);

/** The bench's nonce protocol (as RawShell's) over any stdin/stdout pair. */
class StreamShell {
  private buf = '';
  private waiter: { marker: string; resolve: () => void } | undefined;

  constructor(private readonly stdin: Writable, stdout: Readable) {
    stdout.setEncoding('utf8').on('data', (d: string) => {
      this.buf += d;
      const w = this.waiter;
      if (w === undefined) return;
      const i = this.buf.indexOf(w.marker);
      if (i === -1) return;
      this.buf = this.buf.slice(i + w.marker.length);
      this.waiter = undefined;
      w.resolve();
    });
  }

  run(cmd: string): Promise<void> {
    const marker = `__END_${randomBytes(12).toString('hex')}__`;
    return new Promise((resolve) => {
      this.waiter = { marker, resolve };
      this.stdin.write(`${cmd}\nprintf '%s' '${marker}'\n`);
    });
  }
}

export function root(): { root: string; cleanup: () => void } {
  const dir = mkdtempSync(join(tmpdir(), 'berth-bench-bwrap-'));
  chmodSync(dir, 0o711);
  const r = join(dir, 'root');
  prepareRoot(r);
  return { root: r, cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}

/** A bare sandbox from the backend's building blocks, with bash; `homeFiles` are written into its home first. */
export async function start(
  host: BwrapHost, r: string, name: string, homeFiles: Record<string, string> = {},
): Promise<{ sb: BwrapSandbox; shell: StreamShell; remove: () => Promise<void> }> {
  const placement = placeSandbox({ root: r, name, range: RANGE });
  for (const [file, text] of Object.entries(homeFiles)) writeFileSync(join(placement.dirs.home, file), text, { mode: 0o644 });
  const sb = await startSandbox({
    ...host,
    dirs: placement.dirs,
    user: placement.user,
    network: 'none',
    seccomp: seccompProgram(),
    hostname: 'bench',
    tmpSizeBytes: 64 << 20,
    maxProcesses: 512,
  });
  const p = await sb.spawn(['/bin/bash', '--noprofile', '--norc'], { env: { ...PATH, HOME: '/home/sandbox' }, stdin: true });
  p.stderr.resume();
  return {
    sb,
    shell: new StreamShell(p.stdin!, p.stdout),
    remove: async () => {
      await sb.stop();
      removeSandbox(r, placement.dirs);
    },
  };
}

/** A new session's first command from a warm pool (issue 12), the pool full when each sample starts. */
async function warmPoolRow(sandboxRoot: string): Promise<void> {
  const home = mkdtempSync(join(tmpdir(), 'berth-bench-bwrap-warm-'));
  const broker = await Broker.open({
    config: parseConfig({ backend: 'bwrap', persistent: false, warmPool: { size: 2 }, bwrap: { root: sandboxRoot, uids: { first: RANGE.first + RANGE.count + 1000, count: 1000 }, tmpSizeMb: 64 } }),
    berthHome: home, env: { PATH: process.env['PATH'] }, warmPool: true,
  });
  try {
    await broker.exec({ session: 'warm-up' }, 'true');
    const warm: number[] = [];
    for (let i = 0; i < 20; i++) {
      await broker.warmPoolsSettled();
      const t0 = performance.now();
      await broker.exec({ session: `warm-${i}` }, 'true');
      warm.push(performance.now() - t0);
      await broker.closeSession({ session: `warm-${i}` });
    }
    const w = row('berth: new session to first command, warm pool', warm);
    console.log(`  warm pool p50 ${fmt(w.p50)} ${verdict('< 50 ms', w.p50 < 50)}`);
  } finally {
    await broker.close();
    rmSync(home, { recursive: true, force: true });
  }
}

/** Through berth: the library with backend bwrap, as an agent's calls reach it. */
async function berthRows(sandboxRoot: string): Promise<void> {
  const home = mkdtempSync(join(tmpdir(), 'berth-bench-bwrap-home-'));
  const broker = await Broker.open({
    config: parseConfig({ backend: 'bwrap', persistent: false, bwrap: { root: sandboxRoot, uids: { first: RANGE.first + RANGE.count, count: 1000 }, tmpSizeMb: 64 } }),
    berthHome: home, env: { PATH: process.env['PATH'] },
  });
  try {
    // The probe runs once per process, at the first call: not part of a new sandbox's cost.
    await broker.exec({ session: 'warm-up' }, 'true');
    const cold: number[] = [];
    for (let i = 0; i < 30; i++) {
      const scope = { session: `cold-${i}` };
      const t0 = performance.now();
      const res = await broker.exec(scope, 'true');
      cold.push(performance.now() - t0);
      if (res.exitCode !== 0) throw new Error(`berth exec in a new bwrap sandbox exited ${res.exitCode}: ${res.output}`);
      await broker.removeSandboxOf(scope);
    }
    row('berth: new sandbox to first command (broker.exec, new session)', cold);
    await warmPoolRow(sandboxRoot);
    const raw = new RawShell();
    const rawRow = row('bare persistent bash on the host', await timeMany(N_EXEC, () => raw.run('true')));
    raw.close();
    const session = broker.session({ session: 'bench' });
    const berthRow = row('berth library exec (bwrap backend)', await timeMany(N_EXEC, () => session.exec('true')));
    console.log(`  berth p50 / bare bash p50 = ${(berthRow.p50 / rawRow.p50).toFixed(2)}x   ${verdict('<= 1.5x', berthRow.p50 / rawRow.p50 <= 1.5)}`);
  } finally {
    await broker.close();
    rmSync(home, { recursive: true, force: true });
  }
}

/** bwrap alone with the same namespaces and flags (no berth, no filter, no mounts but /usr), running /bin/true. */
function bareBwrap(host: BwrapHost, uid: number | undefined): Promise<void> {
  const args = ['--unshare-all', '--unshare-user', '--disable-userns', '--die-with-parent', '--new-session', '--cap-drop', 'ALL', '--ro-bind', '/usr', '/usr'];
  for (const p of host.systemPaths) if (p.kind === 'symlink') args.push('--symlink', p.target, p.path);
  args.push('--proc', '/proc', '--dev', '/dev', '--', '/bin/true');
  return new Promise((resolve, reject) => {
    const c = spawn(host.bwrapPath, args, { stdio: 'ignore', env: {}, ...(uid === undefined ? {} : { uid, gid: uid }) });
    c.on('error', reject);
    c.on('exit', (code) => (code === 0 ? resolve() : reject(new Error(`bwrap exited ${code}`))));
  });
}

/** Host pids in the pid namespace of `hostPid`, plus bwrap (its parent, outside the namespace). */
function sandboxPids(hostPid: number): number[] {
  const ns = readlinkSync(`/proc/${hostPid}/ns/pid`);
  const ppid = Number(/^PPid:\s+(\d+)/m.exec(readFileSync(`/proc/${hostPid}/status`, 'utf8'))?.[1]);
  const pids = [ppid];
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      if (readlinkSync(`/proc/${d}/ns/pid`) === ns) pids.push(Number(d));
    } catch {
      // gone meanwhile
    }
  }
  return pids;
}

function kb(pid: number, file: 'status' | 'smaps_rollup', key: string): number {
  const m = new RegExp(`^${key}:\\s+(\\d+) kB`, 'm').exec(readFileSync(`/proc/${pid}/${file}`, 'utf8'));
  return Number(m?.[1] ?? 0);
}

export async function bwrapBench(): Promise<void> {
  const load = () => loadavg().map((l) => l.toFixed(1)).join(' ');
  console.log(`\n# bwrap sandbox (load average ${load()}, ${IS_ROOT ? 'as root: one uid per sandbox' : "as berth's own uid"})`);
  const r = root();
  try {
    let host: BwrapHost;
    try {
      host = await probeBwrap({ root: r.root, user: IS_ROOT ? { uid: RANGE.first + RANGE.count - 1, gid: RANGE.first + RANGE.count - 1 } : undefined, seccomp: seccompProgram() });
    } catch (err) {
      console.log(`  skipped: ${err instanceof Error ? err.message : String(err)}`);
      return;
    }
    console.log(`  bubblewrap ${host.version} at ${host.bwrapPath}`);
    await berthRows(r.root);

    let n = 0;
    const coldSamples: number[] = [];
    const parts = { start: [] as number[], spawn: [] as number[], first: [] as number[] };
    for (let i = 0; i < 30; i++) {
      const t0 = performance.now();
      const placement = placeSandbox({ root: r.root, name: `cold-${n++}`, range: RANGE });
      const sb = await startSandbox({ ...host, dirs: placement.dirs, user: placement.user, network: 'none', seccomp: seccompProgram(), hostname: 'bench', tmpSizeBytes: 64 << 20, maxProcesses: 512 });
      const t1 = performance.now();
      const p = await sb.spawn(['/bin/bash', '--noprofile', '--norc'], { env: PATH, stdin: true });
      const t2 = performance.now();
      await new StreamShell(p.stdin!, p.stdout).run('true');
      const t3 = performance.now();
      coldSamples.push(t3 - t0);
      parts.start.push(t1 - t0);
      parts.spawn.push(t2 - t1);
      parts.first.push(t3 - t2);
      await sb.stop();
      removeSandbox(r.root, placement.dirs);
    }
    row('new sandbox to first command', coldSamples);
    const floor: number[] = [];
    for (let i = 0; i < 30; i++) {
      const t0 = performance.now();
      await bareBwrap(host, IS_ROOT ? RANGE.first + RANGE.count - 2 : undefined);
      floor.push(performance.now() - t0);
    }
    row('floor: bwrap with the same namespaces, /bin/true', floor);
    console.log(`    of which: place + bwrap up ${fmt(percentile(parts.start, 50))}, bash spawned ${fmt(percentile(parts.spawn, 50))}, first command ${fmt(percentile(parts.first, 50))} (p50 each)`);

    const raw = new RawShell();
    const rawRow = row('bare persistent bash on the host', await timeMany(200, () => raw.run('true')));
    raw.close();
    const warm = await start(host, r.root, 'warm');
    const inRow = row('persistent bash in a bwrap sandbox', await timeMany(200, () => warm.shell.run('true')));
    await warm.remove();
    console.log(`  sandbox p50 / host p50 = ${(inRow.p50 / rawRow.p50).toFixed(2)}x   ${verdict('<= 1.5x', inRow.p50 / rawRow.p50 <= 1.5)}`);

    const COUNT = Number(process.env['BENCH_BWRAP_IDLE'] ?? 200);
    const idle: Awaited<ReturnType<typeof start>>[] = [];
    try {
      for (let i = 0; i < COUNT; i++) idle.push(await start(host, r.root, `idle-${i}`));
      for (const s of idle) await s.shell.run('true');
      let rss = 0;
      let pss = 0;
      let procs = 0;
      for (const s of idle) {
        for (const pid of sandboxPids(s.sb.hostPid)) {
          rss += kb(pid, 'status', 'VmRSS');
          pss += kb(pid, 'smaps_rollup', 'Pss');
          procs++;
        }
      }
      console.log(
        `  ${COUNT} idle sandboxes (each: bwrap, its pid 1, the init loop, one persistent bash and its watcher): ` +
          `${(procs / COUNT).toFixed(1)} processes, RSS ${(rss / COUNT / 1024).toFixed(2)} MiB, PSS ${(pss / COUNT / 1024).toFixed(2)} MiB per sandbox`,
      );
    } finally {
      for (const s of idle) await s.remove();
    }
    console.log(`  (load average at the end ${load()})`);
  } finally {
    r.cleanup();
  }
}

if (import.meta.url === `file://${process.argv[1]}`) await bwrapBench();
