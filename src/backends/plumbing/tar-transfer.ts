import { PassThrough, Readable } from 'node:stream';
import { BerthError, TimeoutError } from '../../errors.js';
import type { SpawnedProcess } from '../../shell/transport.js';
import { ended, type Spawn } from './exec-once.js';

/*
 * Archives in and out of a sandbox through `tar` run in it: the same filesystem the agent's shell
 * sees, whatever is mounted where (an engine's archive endpoints miss tmpfs mounts: see the
 * docker backend's notes). The archive format is the sandbox tar's; berth's own reader and writer
 * (files/tar.ts) keep the refusals.
 */

/** Time one archive may take to go in. */
const PUT_TIMEOUT_MS = 300_000;

function tarFailed(what: string, where: string, code: number | null, stderr: string): BerthError {
  const detail = stderr.trim().split('\n').slice(-3).join('; ') || 'no message';
  return new BerthError('transfer_failed', `${what} in ${where} failed (tar exit ${code ?? 'unknown'}): ${detail}`);
}

function tail(stream: Readable): () => string {
  const chunks: Buffer[] = [];
  let kept = 0;
  stream.on('data', (b: Buffer) => {
    // Only the end matters for the message; a flood is not kept.
    if (kept < 64 * 1024) {
      chunks.push(b);
      kept += b.length;
    }
  });
  stream.on('error', () => undefined);
  return () => Buffer.concat(chunks).toString('utf8');
}

/**
 * `tar -x` into `destDir` with the archive on stdin; resolves only once tar exited 0. A source
 * that fails (an upload cut short) stops tar and rejects with the source's error.
 */
export async function putArchiveVia(spawn: Spawn, destDir: string, tar: Buffer | Readable, where: string): Promise<void> {
  const proc = await spawn(['tar', '-x', '-o', '-f', '-', '-C', destDir], { env: {}, stdin: true });
  const stdin = proc.stdin!;
  proc.stdout.resume();
  const stderr = tail(proc.stderr);
  stdin.on('error', () => undefined);
  // Watched from the start: a tar that fails at once (no such dir) ends its output before the archive is sent.
  const finished = ended(proc.stderr);
  let timer: NodeJS.Timeout | undefined;
  const send = async (): Promise<void> => {
    const source = Buffer.isBuffer(tar) ? Readable.from(chunks(tar)) : tar;
    for await (const chunk of source as AsyncIterable<Buffer>) {
      if (stdin.destroyed || stdin.writableEnded) break;
      if (!stdin.write(chunk)) await drained(stdin);
    }
    if (!stdin.destroyed && !stdin.writableEnded) stdin.end();
    await finished;
  };
  try {
    await Promise.race([
      send(),
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new TimeoutError(`writing an archive into ${destDir} in ${where} took over ${PUT_TIMEOUT_MS} ms`)), PUT_TIMEOUT_MS);
      }),
    ]);
  } catch (err) {
    await proc.kill();
    throw err;
  } finally {
    clearTimeout(timer);
  }
  const code = await proc.exited;
  if (code !== 0) throw tarFailed(`writing into ${destDir}`, where, code, stderr());
}

/** Waits for `drain` (or the stream's end), leaving no listener behind. */
function drained(stream: NodeJS.WritableStream & { off(e: string, f: () => void): unknown; on(e: string, f: () => void): unknown }): Promise<void> {
  return new Promise<void>((resolve) => {
    const done = (): void => {
      stream.off('drain', done);
      stream.off('close', done);
      resolve();
    };
    stream.on('drain', done);
    stream.on('close', done);
  });
}

function* chunks(buf: Buffer): Generator<Buffer> {
  for (let i = 0; i < buf.length; i += 256 * 1024) yield buf.subarray(i, i + 256 * 1024);
}

/**
 * `tar -c` of `path` as `./<basename>` under its parent, as a stream: data flows as it comes; the
 * stream ends only once tar exited 0 and errors otherwise (a failed producer never looks like a
 * short archive). Destroying it kills tar.
 */
export async function getArchiveVia(spawn: Spawn, path: string, where: string): Promise<Readable> {
  const slash = path.lastIndexOf('/');
  const parent = slash <= 0 ? '/' : path.slice(0, slash);
  const base = path.slice(slash + 1);
  const proc = await spawn(['tar', '-c', '-f', '-', '-C', parent, `./${base}`], { env: {}, stdin: false });
  return guardedStream(proc, (code, text) => tarFailed(`reading ${path}`, where, code, text));
}

/**
 * The producer's stdout as a stream that ends only after the producer exited 0, and errors
 * otherwise. Destroying it kills the producer.
 */
export function guardedStream(proc: SpawnedProcess, failure: (code: number | null, stderr: string) => Error): Readable {
  const out = new PassThrough();
  const stderr = tail(proc.stderr);
  proc.stdout.on('data', (b: Buffer) => {
    if (!out.write(b)) {
      proc.stdout.pause();
      out.once('drain', () => proc.stdout.resume());
    }
  });
  proc.stdout.on('error', () => undefined);
  let finished = false;
  void Promise.all([ended(proc.stdout), ended(proc.stderr)]).then(async () => {
    if (out.destroyed) return;
    const code = await proc.exited;
    finished = true;
    if (code === 0) out.end();
    else out.destroy(failure(code, stderr()));
  });
  // A reader that stops early (destroys the stream) stops the producer; one that read it all does not need to.
  out.once('close', () => {
    if (!finished) void proc.kill();
  });
  return out;
}
