import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import { row, verdict } from './stats.js';

const run = promisify(execFile);
const ROOT = resolve(import.meta.dirname, '..');
const BIN = join(ROOT, 'bin', 'berth.js');

/** Milliseconds a fresh node spends importing `module` (measured inside the child, so node's own start-up is left out). */
async function importMs(module: string): Promise<number> {
  const url = pathToFileURL(join(ROOT, module)).href;
  const script = `const t = performance.now(); await import(${JSON.stringify(url)}); process.stdout.write(String(performance.now() - t));`;
  const { stdout } = await run(process.execPath, ['--input-type=module', '-e', script]);
  return Number(stdout);
}

/** Wall-clock milliseconds of one `berth ...` process, spawn to exit. */
async function cliMs(args: string[], env: NodeJS.ProcessEnv): Promise<number> {
  const t = process.hrtime.bigint();
  await run(process.execPath, [BIN, ...args], { env });
  return Number(process.hrtime.bigint() - t) / 1e6;
}

async function sample(n: number, fn: () => Promise<number>): Promise<number[]> {
  await fn();
  const out: number[] = [];
  for (let i = 0; i < n; i++) out.push(await fn());
  return out;
}

/**
 * Start-up costs of the built package (`dist/`): what `import 'berth'` costs against the broker
 * module alone in the same run, and how long `berth --version`, `berth --help` and `berth explain`
 * take as processes.
 */
export async function startupBench(n = Number(process.env['BENCH_STARTUP_N'] ?? 30)): Promise<void> {
  console.log(`\n# start-up (built dist/, fresh node per sample, n=${n})`);
  row('import "berth" (dist/index.js)', await sample(n, () => importMs('dist/index.js')));
  row('import the broker alone (dist/broker/broker.js)', await sample(n, () => importMs('dist/broker/broker.js')));
  const home = mkdtempSync(join(tmpdir(), 'berth-bench-startup-'));
  try {
    // explain is pure policy: it opens the state and resolves a binding, with no engine call.
    const env = { PATH: process.env['PATH'], HOME: home, BERTH_HOME: home };
    row('node -e 0 (bare node, for reference)', await sample(n, async () => {
      const t = process.hrtime.bigint();
      await run(process.execPath, ['-e', '0'], { env });
      return Number(process.hrtime.bigint() - t) / 1e6;
    }));
    const version = row('berth --version (process)', await sample(n, () => cliMs(['--version'], env)));
    console.log(`  berth --version p50 ${version.p50.toFixed(0)} ms   ${verdict('< 150 ms', version.p50 < 150)}`);
    row('berth --help (process)', await sample(n, () => cliMs(['--help'], env)));
    row('berth explain --session bench (process)', await sample(n, () => cliMs(['explain', '--session', 'bench'], env)));
  } finally {
    rmSync(home, { recursive: true, force: true });
  }
}
