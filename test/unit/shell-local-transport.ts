import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { constants } from 'node:os';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ExecOnceResult, ShellTransport } from '../../src/backends/backend.js';
import type { ShellOptions } from '../../src/shell/types.js';

/** A host bash over stdio pipes: on a host backend the host is the sandbox. */
export function openLocalBash(env: Record<string, string>, cwd: string): Promise<ShellTransport> {
  const child = spawn('bash', ['--noprofile', '--norc'], { stdio: ['pipe', 'pipe', 'pipe'], env, cwd });
  const exited = new Promise<number | null>((resolve) => {
    child.once('exit', (code, signal) => {
      resolve(code ?? (signal !== null ? 128 + (constants.signals[signal] ?? 0) : null));
    });
    child.once('error', () => resolve(null));
  });
  return Promise.resolve({
    stdin: child.stdin,
    stdout: child.stdout,
    stderr: child.stderr,
    exited,
    async kill() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      await exited;
    },
  });
}

export function execOnceLocal(argv: string[], opts?: { timeoutMs?: number }): Promise<ExecOnceResult> {
  return new Promise((resolve, reject) => {
    const [cmd, ...args] = argv;
    if (cmd === undefined) {
      reject(new Error('empty argv'));
      return;
    }
    const child = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    child.stdout.on('data', (b: Buffer) => out.push(b));
    child.stderr.on('data', (b: Buffer) => err.push(b));
    const timer = setTimeout(() => child.kill('SIGKILL'), opts?.timeoutMs ?? 10_000);
    child.once('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
    child.once('close', (code) => {
      clearTimeout(timer);
      resolve({ exitCode: code ?? 125, stdout: Buffer.concat(out), stderr: Buffer.concat(err) });
    });
  });
}

export interface Fixture {
  dir: string;
  stateDir: string;
  spillDir: string;
  work: string;
  options(over?: Partial<ShellOptions>, env?: Record<string, string>): ShellOptions;
  cleanup(): void;
}

export function makeFixture(): Fixture {
  const dir = mkdtempSync(join(tmpdir(), 'berth-shell-'));
  const stateDir = join(dir, 'state');
  const spillDir = join(dir, 'spill');
  const work = join(dir, 'work');
  rmSync(work, { recursive: true, force: true });
  return {
    dir,
    stateDir,
    spillDir,
    work,
    options(over = {}, env = {}) {
      const fullEnv = { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: dir, LANG: 'C.UTF-8', ...env };
      return {
        open: (extra) => openLocalBash({ ...fullEnv, ...extra }, dir),
        execOnce: execOnceLocal,
        stateDir,
        shellId: 'test-shell',
        defaultCwd: dir,
        secretNames: [],
        spillDir,
        maxOutputChars: 100_000,
        ...over,
      };
    },
    cleanup() {
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** Live processes whose argv contains `needle` (zombies excluded). */
export function pidsWithArg(needle: string): number[] {
  const found: number[] = [];
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d) || Number(d) === process.pid) continue;
    try {
      const stat = readFileSync(`/proc/${d}/stat`, 'utf8');
      if (/\) Z /.test(stat)) continue;
      const argv = readFileSync(`/proc/${d}/cmdline`, 'utf8').split('\0');
      if (argv.includes(needle)) found.push(Number(d));
    } catch {
      // gone meanwhile
    }
  }
  return found;
}

export function killAll(pids: number[]): void {
  for (const p of pids) {
    try {
      process.kill(p, 'SIGKILL');
    } catch {
      // already gone
    }
  }
}
