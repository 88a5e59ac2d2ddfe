import type { PassThrough, Readable } from 'node:stream';
import type Dockerode from 'dockerode';

/** Env name carrying a per-shell tag, so `kill()` can find the shell's processes in the container. */
export const SHELL_TAG_ENV = 'BERTH_SHELL_TAG';

const HEADER_BYTES = 8;

/**
 * Splits Docker's multiplexed exec stream (8-byte header: stream type, 3 zero bytes, uint32 BE
 * length) into stdout and stderr. Both outputs end when the source ends, closes or fails, so a
 * dead engine connection ends the transport instead of leaving readers waiting.
 */
export function demultiplex(source: Readable, stdout: PassThrough, stderr: PassThrough): void {
  let pending: Buffer = Buffer.alloc(0);
  let frameType = -1;
  let frameLeft = 0;
  let ended = false;
  const finish = (): void => {
    if (ended) return;
    ended = true;
    stdout.end();
    stderr.end();
  };
  source.on('data', (chunk: Buffer) => {
    let buf = pending.length === 0 ? chunk : Buffer.concat([pending, chunk]);
    pending = Buffer.alloc(0);
    while (buf.length > 0) {
      if (frameLeft === 0) {
        if (buf.length < HEADER_BYTES) {
          pending = buf;
          return;
        }
        frameType = buf[0]!;
        frameLeft = buf.readUInt32BE(4);
        buf = buf.subarray(HEADER_BYTES);
        continue;
      }
      const take = Math.min(frameLeft, buf.length);
      const part = buf.subarray(0, take);
      // Type 2 is stderr; 1 (stdout) and anything unexpected go to stdout rather than vanish.
      if (!ended) (frameType === 2 ? stderr : stdout).write(part);
      frameLeft -= take;
      buf = buf.subarray(take);
    }
  });
  source.once('end', finish);
  source.once('close', finish);
  source.once('error', finish);
}

/** Inspect an exec until it stops running (bounded), then report its exit code; null when unknown. */
export async function exitCodeOf(exec: Dockerode.Exec, timeoutMs: number): Promise<number | null> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      const info = await exec.inspect({ abortSignal: AbortSignal.timeout(Math.max(1, deadline - Date.now()) + 1_000) });
      if (!info.Running) return info.ExitCode ?? null;
    } catch {
      return null;
    }
    if (Date.now() >= deadline) return null;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}
