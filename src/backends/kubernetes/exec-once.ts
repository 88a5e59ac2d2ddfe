import { BackendUnavailableError, TimeoutError } from '../../errors.js';
import type { ExecOnceOptions, ExecOnceResult } from '../../shell/transport.js';
import { helperOutputCap, helperOutputTooLarge } from '../plumbing/exec-once.js';
import { spawnInPod, type ExecEnd, type ExecTarget, type PodSpawnOptions } from './spawn.js';

const DEFAULT_TIMEOUT_MS = 30_000;

/**
 * Run one helper in the pod and collect its output, bounded like docker's `execOnceIn`: past
 * `maxOutputBytes` (stdout + stderr) or `timeoutMs` the helper's processes are killed by their
 * tag and the call rejects (`helper_output_too_large`, TimeoutError). An exec that ends without
 * an exit status (dropped, or the runtime could not start it) is a BackendUnavailableError.
 * (Once the backend seam lands, this is the shared plumbing's execOnce over `spawnInPod`.)
 */
export async function execOnceInPod(
  target: ExecTarget,
  argv: string[],
  opts: ExecOnceOptions & Pick<PodSpawnOptions, 'heartbeatMs' | 'log'> = {},
): Promise<ExecOnceResult> {
  const timeoutMs = opts.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  const cap = helperOutputCap(opts);
  const where = `pod ${target.pod}`;
  const proc = await spawnInPod(target, argv, { env: {}, stdin: false, heartbeatMs: opts.heartbeatMs, log: opts.log });
  const out: Buffer[] = [];
  const err: Buffer[] = [];
  let collected = 0;
  let overflowed: () => void = () => undefined;
  const overflow = new Promise<'overflow'>((resolve) => (overflowed = () => resolve('overflow')));
  const collect = (into: Buffer[]) => (chunk: Buffer): void => {
    collected += chunk.length;
    if (collected > cap) {
      out.length = 0;
      err.length = 0;
      overflowed();
      return;
    }
    into.push(chunk);
  };
  proc.stdout.on('data', collect(out));
  proc.stderr.on('data', collect(err));
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<'timeout'>((resolve) => (timer = setTimeout(() => resolve('timeout'), timeoutMs)));
  const outcome: ExecEnd | 'overflow' | 'timeout' = await Promise.race([proc.ended, overflow, timeout]);
  clearTimeout(timer);
  if (outcome === 'overflow' || outcome === 'timeout') {
    await proc.kill();
    if (outcome === 'overflow') throw helperOutputTooLarge(argv, where, cap);
    throw new TimeoutError(`helper ${JSON.stringify(argv[0] ?? '')} in ${where} did not finish within ${timeoutMs} ms`);
  }
  // Both streams end when the status arrives; wait for their last 'data' events.
  await Promise.all([ended(proc.stdout), ended(proc.stderr)]);
  if (outcome.kind === 'exited') return { exitCode: outcome.code, stdout: Buffer.concat(out), stderr: Buffer.concat(err) };
  const why = outcome.kind === 'failed' ? outcome.message : outcome.reason;
  throw new BackendUnavailableError(`kubernetes: helper ${JSON.stringify(argv[0] ?? '')} in ${where} ended without an exit status: ${why}`);
}

function ended(s: NodeJS.ReadableStream & { readableEnded?: boolean }): Promise<void> {
  return new Promise((resolve) => {
    if (s.readableEnded === true) resolve();
    else s.once('end', () => resolve());
  });
}
