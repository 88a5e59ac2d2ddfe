import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

export const REPO = resolve(import.meta.dirname, '..', '..');
export const BERTH_BIN = join(REPO, 'bin', 'berth.js');

export interface CliRun {
  code: number;
  stdout: string;
  stderr: string;
}

/** Spawns the real `berth` (the built dist, as `npx berth` runs it). */
export function runBerth(args: string[], opts: { env?: NodeJS.ProcessEnv; cwd?: string; timeoutMs?: number } = {}): Promise<CliRun> {
  return new Promise((resolvePromise, reject) => {
    const child = spawn(process.execPath, [BERTH_BIN, ...args], {
      cwd: opts.cwd ?? REPO, env: opts.env ?? process.env, stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
    child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    const timer = setTimeout(() => child.kill('SIGKILL'), opts.timeoutMs ?? 60_000);
    child.on('error', reject);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      resolvePromise({ code: code ?? (signal ? -1 : 0), stdout, stderr });
    });
  });
}

/** A private BERTH_HOME and working dir with a config file; `dispose` removes both. */
export function tempInstall(configYaml: string): { home: string; dir: string; env: NodeJS.ProcessEnv; [Symbol.dispose](): void } {
  const root = realpathSync(mkdtempSync(join(tmpdir(), 'berth-test-')));
  const home = join(root, 'home');
  const dir = join(root, 'work');
  const env: NodeJS.ProcessEnv = { PATH: process.env['PATH'], HOME: process.env['HOME'], BERTH_HOME: home };
  if (process.env['DOCKER_HOST']) env['DOCKER_HOST'] = process.env['DOCKER_HOST'];
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'berth.yaml'), configYaml);
  return { home, dir, env, [Symbol.dispose]: () => rmSync(root, { recursive: true, force: true, maxRetries: 5, retryDelay: 100 }) };
}
