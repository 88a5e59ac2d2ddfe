import { execFile, spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { Broker } from '../src/broker/broker.js';
import { parseConfig } from '../src/setup/parse-config.js';
import { BENCH_IMAGE, dockerUnavailable } from './engine-check.js';
import { row, verdict } from './stats.js';

const run = promisify(execFile);
const BIN = join(resolve(import.meta.dirname, '..'), 'bin', 'berth.js');
/** Sandboxes on the store the two commands read (two tenants). */
const SANDBOXES = 6;

/**
 * Wall-clock milliseconds from spawning `berth top` in a pseudo-terminal (util-linux `script`)
 * until its first frame is on the terminal, and until its first frame with every figure (no `…`
 * left: the engines' second sample, for CPU). The process is then interrupted.
 */
function topFrames(dir: string, env: NodeJS.ProcessEnv): Promise<{ firstMs: number; fullMs: number }> {
  return new Promise((resolvePromise, reject) => {
    const t = process.hrtime.bigint();
    const since = (): number => Number(process.hrtime.bigint() - t) / 1e6;
    const child = spawn('script', ['-qfec', `stty cols 120 rows 40; exec ${process.execPath} ${BIN} top --interval 0.5`, '/dev/null'], { cwd: dir, env, stdio: ['pipe', 'pipe', 'ignore'] });
    let out = '';
    let firstMs: number | undefined;
    let done = false;
    child.stdout.setEncoding('utf8').on('data', (d: string) => {
      out += d;
      const frames = out.split('\x1b[H').slice(1).filter((f) => !f.startsWith('\x1b[2J') && f.includes('\x1b[J'));
      if (firstMs === undefined && frames.length > 0) firstMs = since();
      const drawn = firstMs;
      if (!done && drawn !== undefined && frames.some((f) => !f.includes('…'))) {
        done = true;
        const fullMs = since();
        child.stdin.write('\x03');
        child.once('close', () => resolvePromise({ firstMs: drawn, fullMs }));
      }
    });
    child.on('error', reject);
    child.stdin.on('error', () => undefined);
    setTimeout(() => child.kill('SIGKILL'), 60_000).unref();
  });
}

async function lsMs(dir: string, env: NodeJS.ProcessEnv): Promise<number> {
  const t = process.hrtime.bigint();
  await run(process.execPath, [BIN, 'ls'], { cwd: dir, env });
  return Number(process.hrtime.bigint() - t) / 1e6;
}

/**
 * `berth top`'s first frame against `berth ls` on the same store (both start a node process and
 * open the store; ls asks the engines nothing for a tenant's list): the first frame should cost
 * about what ls costs, and under a second; the full frame waits for the engines' stats.
 */
export async function topFirstFrameBench(n = Number(process.env['BENCH_TOP_N'] ?? 8)): Promise<void> {
  const why = await dockerUnavailable();
  if (why !== undefined) {
    console.log(`\n# berth top first frame: SKIPPED (${why})`);
    return;
  }
  console.log(`\n# berth top: first frame vs berth ls, same store (${SANDBOXES} docker sandboxes, built dist/, n=${n})`);
  const root = mkdtempSync(join(tmpdir(), 'berth-bench-top-'));
  const home = join(root, 'home');
  const env = { PATH: process.env['PATH'], HOME: root, BERTH_HOME: home };
  // The tenants' disk bounds lifted: the default adds up to this filesystem's size, which may refuse a sixth sandbox.
  const raw = { backend: 'docker', persistent: false, limits: { diskMb: 100_000_000 }, docker: { image: BENCH_IMAGE } };
  writeFileSync(join(root, 'berth.yaml'), JSON.stringify(raw));
  const broker = await Broker.open({ config: parseConfig(raw), berthHome: home, env, holdSessions: false });
  try {
    for (let i = 0; i < SANDBOXES; i++) await broker.exec({ tenant: i % 2 === 0 ? 'local' : 'other', session: `s${i}` }, 'true');
    const ls: number[] = [];
    const first: number[] = [];
    const full: number[] = [];
    await lsMs(root, env);
    for (let i = 0; i < n; i++) {
      ls.push(await lsMs(root, env));
      const f = await topFrames(root, env);
      first.push(f.firstMs);
      full.push(f.fullMs);
    }
    const lsRow = row('berth ls (process, spawn to exit)', ls);
    const firstRow = row('berth top: first frame (spawn to screen)', first);
    row('berth top: every figure (engines, CPU)', full);
    console.log(`  top first frame p50 / ls p50 = ${(firstRow.p50 / lsRow.p50).toFixed(2)}x   first frame ${verdict('< 1000 ms', firstRow.p50 < 1000)}`);
  } finally {
    for (let i = 0; i < SANDBOXES; i++) await broker.closeSession({ tenant: i % 2 === 0 ? 'local' : 'other', session: `s${i}` }).catch(() => undefined);
    await broker.close();
    rmSync(root, { recursive: true, force: true });
  }
}
