import { BerthError } from '../../errors.js';
import type { ShellTransport } from '../../shell/transport.js';
import type { Spawn } from './exec-once.js';

/** The shell every sandbox runs: no profile or rc file of the image decides what it does. */
export const SHELL_ARGV = ['bash', '--noprofile', '--norc'] as const;

/**
 * A persistent `bash` on a stream: stdin carries the commands, stdout and stderr their output.
 * `env` (the granted environment) goes through the spawn's env, never argv.
 */
export async function openShellVia(spawn: Spawn, opts: { env: Readonly<Record<string, string>>; cwd: string }): Promise<ShellTransport> {
  const proc = await spawn(SHELL_ARGV, { env: opts.env, cwd: opts.cwd, stdin: true, lasting: true });
  const stdin = proc.stdin;
  if (stdin === null) {
    await proc.kill();
    throw new BerthError('internal', 'a shell was started without its stdin');
  }
  // A write racing the shell's death must not crash berth; `exited` reports it.
  stdin.on('error', () => undefined);
  return { stdin, stdout: proc.stdout, stderr: proc.stderr, exited: proc.exited, kill: () => proc.kill(), pids: proc.pids, hostPipes: proc.hostPipes };
}
