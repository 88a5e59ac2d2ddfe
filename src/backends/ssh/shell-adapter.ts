import { constants } from 'node:os';
import { TimeoutError } from '../../errors.js';
import type { ExecOnceOptions, ExecOnceResult, ShellTransport } from '../backend.js';
import { helperOutputCap, helperOutputTooLarge } from '../plumbing/exec-once.js';
import type { RemoteExit, RemoteProcess } from './spawn.js';

/*
 * The bridge from a spawned remote process to what the shell layer takes today (a
 * `ShellTransport`, an `execOnce`). The backend seam (issue 9) derives both from a backend's one
 * `spawn`; once it lands this file is that seam's job and can go.
 */

const EXEC_ONCE_TIMEOUT_MS = 30_000;

/** Exit code as a shell reports it: the code, or 128 + the signal number; null when unknown. */
export function exitCodeOf(exit: RemoteExit): number | null {
  if (exit.code !== null) return exit.code;
  if (exit.signal === null) return null;
  const n = (constants.signals as Record<string, number | undefined>)[exit.signal];
  return n === undefined ? null : 128 + n;
}

/** A `ShellTransport` over a remote process (its `kill` ends the remote tree). */
export function shellTransportOf(p: RemoteProcess): ShellTransport {
  return {
    stdin: p.stdin,
    stdout: p.stdout,
    stderr: p.stderr,
    exited: p.exited.then(exitCodeOf),
    kill: () => p.kill(),
  };
}

/**
 * Runs a helper to completion through `spawn` and collects its output, bounded in time and size
 * (past either, its tree is killed and the call rejects).
 */
export async function execOnceVia(spawn: (argv: string[]) => Promise<RemoteProcess>, argv: string[], opts?: ExecOnceOptions): Promise<ExecOnceResult> {
  const timeoutMs = opts?.timeoutMs ?? EXEC_ONCE_TIMEOUT_MS;
  const cap = helperOutputCap(opts);
  const p = await spawn(argv);
  p.stdin.end();
  const out: Buffer[] = [];
  const err: Buffer[] = [];
  let bytes = 0;
  let failure: Error | undefined;
  const take = (into: Buffer[]) => (c: Buffer): void => {
    bytes += c.length;
    if (bytes > cap) {
      failure ??= helperOutputTooLarge(argv, 'the SSH sandbox', cap);
      void p.kill();
      return;
    }
    if (failure === undefined) into.push(c);
  };
  p.stdout.on('data', take(out));
  p.stderr.on('data', take(err));
  const timer = setTimeout(() => {
    failure ??= new TimeoutError(`helper ${JSON.stringify(argv[0] ?? '')} in the SSH sandbox did not finish within ${timeoutMs} ms`);
    void p.kill();
  }, timeoutMs);
  // The exit status may come before the last output: wait for both ends of the output too.
  const ended = (r: NodeJS.ReadableStream): Promise<void> => new Promise((resolve) => {
    r.once('end', resolve);
    r.once('close', resolve);
  });
  const [exit] = await Promise.all([p.exited, ended(p.stdout), ended(p.stderr)]).finally(() => clearTimeout(timer));
  if (failure !== undefined) throw failure;
  if (exit.error !== undefined) throw exit.error;
  return { exitCode: exitCodeOf(exit) ?? -1, stdout: Buffer.concat(out), stderr: Buffer.concat(err) };
}
