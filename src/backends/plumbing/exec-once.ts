import type { Readable } from 'node:stream';
import { BerthError, TimeoutError } from '../../errors.js';
import type { SpawnOptions } from '../backend.js';
import type { ExecOnceOptions, ExecOnceResult, SpawnedProcess } from '../../shell/transport.js';

/** Default output bound of `execOnce`: far above what any berth helper prints (job reads are <= 1 MiB). */
export const DEFAULT_HELPER_OUTPUT_BYTES = 8 * 1024 * 1024;

/** Default time a helper may take: a probe or a kill scan answers in milliseconds; a loaded host is slow. */
const DEFAULT_HELPER_TIMEOUT_MS = 30_000;

/** The bound to apply for `opts`: the caller's when it is a positive number, else the default. */
export function helperOutputCap(opts: ExecOnceOptions | undefined): number {
  const n = opts?.maxOutputBytes;
  return n !== undefined && Number.isFinite(n) && n > 0 ? Math.floor(n) : DEFAULT_HELPER_OUTPUT_BYTES;
}

/** A helper printed more than its bound (a replaced `sh`, a runaway probe). */
export function helperOutputTooLarge(argv: readonly string[], where: string, capBytes: number): BerthError {
  return new BerthError(
    'helper_output_too_large',
    `helper ${JSON.stringify(argv[0] ?? '')} in ${where} printed more than ${capBytes} bytes (the helper output cap); ` +
      'it was stopped. Check that the sandbox\'s sh and core tools are not replaced by something that floods output',
  );
}

/** How to start a process; a sandbox handle's `spawn`, or a backend's own for its internal helpers. */
export type Spawn = (argv: readonly string[], opts: SpawnOptions) => Promise<SpawnedProcess>;

/**
 * Runs one short helper to its end and collects its output. Helpers run tools the agent can
 * replace, so their output is untrusted: past the cap (stdout + stderr together) nothing more is
 * kept or read, the helper is killed and the call rejects with `helper_output_too_large`. Past
 * `timeoutMs` it is killed and the call rejects with a `TimeoutError`. Nothing goes in on stdin.
 *
 * @example
 * const r = await execOnce(handle.spawn.bind(handle), ['sh', '-c', 'id -u'], { timeoutMs: 5_000 }, 'sandbox s1');
 * r.exitCode; r.stdout.toString(); // 0, '1000\n'
 */
export async function execOnce(spawn: Spawn, argv: readonly string[], opts: ExecOnceOptions | undefined, where: string): Promise<ExecOnceResult> {
  if (argv[0] === undefined) throw new BerthError('internal', 'execOnce needs a program');
  const cap = helperOutputCap(opts);
  const timeoutMs = opts?.timeoutMs ?? DEFAULT_HELPER_TIMEOUT_MS;
  const proc = await spawn(argv, { env: {}, stdin: false });
  return new Promise<ExecOnceResult>((resolve, reject) => {
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    let collected = 0;
    let settled = false;
    const stop = (error: Error): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      out.length = 0;
      err.length = 0;
      // Nothing more is read; the kill runs on (it may need a helper of its own) and never throws.
      proc.stdout.destroy();
      proc.stderr.destroy();
      void proc.kill();
      reject(error);
    };
    const timer = setTimeout(() => stop(new TimeoutError(`helper ${JSON.stringify(argv[0] ?? '')} in ${where} did not finish within ${timeoutMs} ms`)), timeoutMs);
    const collect = (into: Buffer[]) => (chunk: Buffer): void => {
      if (settled) return;
      collected += chunk.length;
      if (collected > cap) stop(helperOutputTooLarge(argv, where, cap));
      else into.push(chunk);
    };
    proc.stdout.on('data', collect(out));
    proc.stderr.on('data', collect(err));
    // Read errors after a stop are the destroyed streams; before it, the end below still comes.
    proc.stdout.on('error', () => undefined);
    proc.stderr.on('error', () => undefined);
    const drained = Promise.all([ended(proc.stdout), ended(proc.stderr)]);
    void drained.then(async () => {
      const code = await proc.exited;
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      resolve({ exitCode: code ?? -1, stdout: Buffer.concat(out), stderr: Buffer.concat(err) });
    });
  });
}

/** Resolves when a stream ended, closed or failed (at once if it did already). */
export function ended(stream: Readable): Promise<void> {
  return new Promise((resolve) => {
    if (stream.readableEnded || stream.destroyed) {
      resolve();
      return;
    }
    stream.once('end', resolve);
    stream.once('close', resolve);
    stream.once('error', resolve);
  });
}
