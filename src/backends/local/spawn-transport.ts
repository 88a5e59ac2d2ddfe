import { spawn } from 'node:child_process';
import type { ShellTransport } from '../backend.js';

/**
 * A ShellTransport over a host child process with piped stdio. The process gets its own process
 * group so `kill()` ends it (and anything still in its group) without touching berth.
 */
export function spawnTransport(file: string, args: string[], opts: { cwd: string; env: Record<string, string> }): Promise<ShellTransport> {
  return new Promise((resolvePromise, reject) => {
    const child = spawn(file, args, { cwd: opts.cwd, env: opts.env, stdio: ['pipe', 'pipe', 'pipe'], detached: true });
    const exited = new Promise<number | null>((res) => {
      child.on('exit', (code, signal) => res(code ?? (signal ? 128 + (signalNumber(signal) ?? 9) : null)));
    });
    // Writes to a shell that died are reported through `exited`, not as a crash of berth.
    child.stdin.on('error', () => {});
    child.on('error', reject);
    child.on('spawn', () => {
      child.off('error', reject);
      child.on('error', () => {});
      let killed = false;
      resolvePromise({
        stdin: child.stdin,
        stdout: child.stdout,
        stderr: child.stderr,
        exited,
        async kill() {
          if (killed || child.exitCode !== null || child.signalCode !== null) return;
          killed = true;
          try {
            if (child.pid !== undefined) process.kill(-child.pid, 'SIGKILL');
          } catch {
            // ESRCH: already gone, which is what we wanted.
          }
          await exited;
        },
      });
    });
  });
}

function signalNumber(signal: NodeJS.Signals): number | undefined {
  const table: Partial<Record<NodeJS.Signals, number>> = { SIGHUP: 1, SIGINT: 2, SIGQUIT: 3, SIGKILL: 9, SIGTERM: 15 };
  return table[signal];
}
