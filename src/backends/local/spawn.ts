import { spawn } from 'node:child_process';
import { closeSync } from 'node:fs';
import { constants } from 'node:os';
import type { SpawnedProcess } from '../../shell/transport.js';
import { fromSpawnError } from '../plumbing/spawn-errors.js';
import { openFifoStdin, type FifoStdin } from './fifo-stdin.js';

/** A host process berth started: its pid is the host's. */
export type HostProcess = SpawnedProcess & { readonly pid: number };

/**
 * Starts a process on this host with piped stdio, in its own process group, so `kill()` ends it
 * and everything still in its group without touching berth. Resolves once the process runs; a
 * program or working dir that is not there rejects through `fromSpawnError`. `env` is the whole
 * environment (nothing of berth's own is inherited).
 */
export async function spawnOnHost(
  argv: readonly string[],
  opts: { cwd: string; env: Readonly<Record<string, string>>; stdin: boolean | 'fifo'; where: string },
): Promise<HostProcess> {
  const [file, ...args] = argv;
  if (file === undefined) throw fromSpawnError(new Error('no program given'), '', opts.where);
  const fifo = opts.stdin === 'fifo' ? await openFifoStdin() : undefined;
  try {
    return await startOnHost(file, args, opts, fifo);
  } catch (err) {
    fifo?.writer.destroy();
    throw err;
  } finally {
    // The child holds its own copy of its end (or never started): berth's goes.
    if (fifo !== undefined) closeSync(fifo.childFd);
  }
}

function startOnHost(
  file: string,
  args: string[],
  opts: { cwd: string; env: Readonly<Record<string, string>>; stdin: boolean | 'fifo'; where: string },
  fifo: FifoStdin | undefined,
): Promise<HostProcess> {
  return new Promise((resolve, reject) => {
    const child = spawn(file, args, {
      cwd: opts.cwd, env: { ...opts.env }, stdio: [fifo?.childFd ?? (opts.stdin === true ? 'pipe' : 'ignore'), 'pipe', 'pipe'], detached: true,
    });
    const stdin = fifo?.writer ?? child.stdin;
    // As Node does with a piped stdin: berth's end goes with the process.
    if (fifo !== undefined) child.once('exit', () => fifo.writer.destroy());
    const exited = new Promise<number | null>((res) => {
      child.once('exit', (code, signal) => res(code ?? (signal === null ? null : 128 + (constants.signals[signal] ?? 9))));
      child.once('error', () => res(null));
    });
    child.once('error', (err) => reject(fromSpawnError(err, file, opts.where)));
    child.once('spawn', () => {
      // After the start, errors (a kill racing the exit) are reported through `exited`.
      child.on('error', () => undefined);
      stdin?.on('error', () => undefined);
      let killing: Promise<void> | undefined;
      resolve({
        pid: child.pid as number,
        pids: async () => (child.pid === undefined ? undefined : { host: child.pid, sandbox: child.pid }),
        stdin,
        stdout: child.stdout!,
        stderr: child.stderr!,
        exited,
        hostPipes: true,
        kill() {
          killing ??= (async () => {
            // One that ended already is left alone, with what it left running (a shell's jobs are the shell layer's).
            if (child.pid !== undefined && child.exitCode === null && child.signalCode === null) {
              try {
                // The whole group: what the process started goes with it (a setsid escapee does not).
                process.kill(-child.pid, 'SIGKILL');
              } catch {
                // ESRCH: the group is gone already, which is what was wanted.
              }
            }
            await exited;
          })();
          return killing;
        },
      });
    });
  });
}
