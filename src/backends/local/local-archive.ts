import { spawn } from 'node:child_process';
import { Readable } from 'node:stream';
import { BerthError, TimeoutError } from '../../errors.js';
import { guardedStream } from '../archive-stream.js';

/* Archives in and out of a local sandbox with the host's own `tar`, in the same format a container's tar reads and writes. */

const PUT_TIMEOUT_MS = 300_000;

interface SpawnOpts {
  cwd: string;
  env: Record<string, string>;
}

function failed(what: string, code: number | null, stderr: string): BerthError {
  const detail = stderr.trim().split('\n').slice(-3).join('; ') || 'no message';
  return new BerthError('transfer_failed', `${what} failed (tar exit ${code ?? 'unknown'}): ${detail}`);
}

/** `tar -x` into `destDir`; resolves only on exit code 0. */
export function putArchiveLocal(destDir: string, tar: Buffer | Readable, opts: SpawnOpts): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn('tar', ['-x', '-o', '-f', '-', '-C', destDir], { cwd: opts.cwd, env: opts.env, stdio: ['pipe', 'ignore', 'pipe'] });
    const err: Buffer[] = [];
    child.stderr.on('data', (b: Buffer) => err.push(b));
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new TimeoutError(`writing an archive into ${destDir} took over ${PUT_TIMEOUT_MS} ms`));
    }, PUT_TIMEOUT_MS);
    child.on('error', (e) => { clearTimeout(timer); reject(e); });
    child.on('close', (code) => {
      clearTimeout(timer);
      if (code === 0) resolve();
      else reject(failed(`writing into ${destDir}`, code, Buffer.concat(err).toString('utf8')));
    });
    child.stdin.on('error', () => undefined);
    if (Buffer.isBuffer(tar)) child.stdin.end(tar);
    else {
      // pipe() neither ends tar's stdin nor reports a source that fails (an upload cut short): stop tar and fail.
      tar.once('error', (e) => {
        clearTimeout(timer);
        child.kill('SIGKILL');
        reject(e);
      });
      tar.pipe(child.stdin);
    }
  });
}

/** `tar -c` of `path` as `./<basename>`; the stream errors unless tar exits 0. */
export async function getArchiveLocal(path: string, opts: SpawnOpts): Promise<Readable> {
  const slash = path.lastIndexOf('/');
  const parent = slash <= 0 ? '/' : path.slice(0, slash);
  const base = path.slice(slash + 1);
  const child = spawn('tar', ['-c', '-f', '-', '-C', parent, `./${base}`], { cwd: opts.cwd, env: opts.env, stdio: ['ignore', 'pipe', 'pipe'] });
  const code = new Promise<number | null>((resolve) => {
    child.on('close', (c) => resolve(c));
    child.on('error', () => resolve(null));
  });
  return guardedStream(
    { destroy: () => { if (child.exitCode === null) child.kill('SIGKILL'); } },
    (stdout, stderr) => {
      child.stdout.pipe(stdout);
      child.stderr.pipe(stderr);
    },
    () => code,
    (c, text) => failed(`reading ${path}`, c, text),
  );
}
