import { PassThrough, Readable, type Duplex } from 'node:stream';
import type Dockerode from 'dockerode';
import { BerthError, TimeoutError } from '../../errors.js';
import { demultiplex } from './exec-stream.js';
import { guardedStream } from '../archive-stream.js';
import { bounded, ENGINE_REQUEST_TIMEOUT_MS, fromDockerError, startAttached, withTimeout } from './engine.js';

/*
 * Archives in and out of a container through `tar` run by an exec, not the Engine's archive
 * endpoints: those work on the container's root filesystem and binds but not on tmpfs mounts.
 * Measured on Engine 20.10: PUT /archive into a tmpfs /workspace answers 200 while the file never
 * appears inside, and GET /archive of a tmpfs file answers 404. Ephemeral sandboxes keep their
 * workspace and home on tmpfs, so the endpoints would report a failed delivery as a success.
 * An exec sees the same filesystem as the agent's shell, whatever is mounted where.
 */

const PUT_TIMEOUT_MS = 300_000;
const EXIT_WAIT_MS = 5_000;

async function exitCode(exec: Dockerode.Exec): Promise<number | null> {
  const deadline = Date.now() + EXIT_WAIT_MS;
  for (;;) {
    const info = await exec.inspect({ abortSignal: AbortSignal.timeout(EXIT_WAIT_MS) }).catch(() => undefined);
    if (info === undefined) return null;
    if (!info.Running) return info.ExitCode ?? null;
    if (Date.now() >= deadline) return null;
    await new Promise((r) => setTimeout(r, 20));
  }
}

async function startExec(docker: Dockerode, containerId: string, argv: string[], stdin: boolean): Promise<{ exec: Dockerode.Exec; socket: Duplex }> {
  const doing = `run tar in container ${containerId.slice(0, 12)}`;
  try {
    const exec = await bounded(docker, ENGINE_REQUEST_TIMEOUT_MS, doing, (abortSignal) => docker.getContainer(containerId).exec({
      Cmd: argv, AttachStdin: stdin, AttachStdout: true, AttachStderr: true, Tty: false, abortSignal,
    }));
    const socket = await startAttached(docker, exec, stdin, doing);
    return { exec, socket };
  } catch (err) {
    throw fromDockerError(docker, err, doing);
  }
}

function tarFailed(what: string, containerId: string, code: number | null, stderr: string): BerthError {
  const detail = stderr.trim().split('\n').slice(-3).join('; ') || 'no message';
  return new BerthError('transfer_failed', `${what} in container ${containerId.slice(0, 12)} failed (tar exit ${code ?? 'unknown'}): ${detail}`);
}

/** `tar -x` into `destDir` with the archive on stdin; resolves only on exit code 0. */
export async function putArchiveExec(docker: Dockerode, containerId: string, destDir: string, tar: Buffer | Readable): Promise<void> {
  const { exec, socket } = await startExec(docker, containerId, ['tar', '-x', '-o', '-f', '-', '-C', destDir], true);
  const stdout = new PassThrough();
  const stderr = new PassThrough();
  const errText: Buffer[] = [];
  stderr.on('data', (b: Buffer) => errText.push(b));
  stdout.resume();
  const done = new Promise<void>((resolve) => stderr.once('end', () => resolve()));
  demultiplex(socket, stdout, stderr);
  const send = async (): Promise<void> => {
    const source = Buffer.isBuffer(tar) ? Readable.from(chunks(tar)) : tar;
    for await (const chunk of source as AsyncIterable<Buffer>) {
      if (socket.destroyed) break;
      if (!socket.write(chunk)) await drained(socket);
    }
    if (!socket.destroyed) socket.end();
    await done;
  };
  try {
    await withTimeout(send(), PUT_TIMEOUT_MS, () => new TimeoutError(`writing an archive into ${destDir} in container ${containerId.slice(0, 12)} took over ${PUT_TIMEOUT_MS} ms`));
  } catch (err) {
    socket.destroy();
    throw err;
  }
  const code = await exitCode(exec);
  if (code !== 0) throw tarFailed(`writing into ${destDir}`, containerId, code, Buffer.concat(errText).toString('utf8'));
}

/** Waits for `drain` (or the socket's end), leaving no listener behind. */
function drained(socket: Duplex): Promise<void> {
  return new Promise<void>((resolve) => {
    const done = (): void => {
      socket.off('drain', done);
      socket.off('close', done);
      resolve();
    };
    socket.on('drain', done);
    socket.on('close', done);
  });
}

function* chunks(buf: Buffer): Generator<Buffer> {
  for (let i = 0; i < buf.length; i += 256 * 1024) yield buf.subarray(i, i + 256 * 1024);
}

/** `tar -c` of `path` (as `./<basename>` under its parent) on a stream that errors unless tar exits 0. */
export async function getArchiveExec(docker: Dockerode, containerId: string, path: string): Promise<Readable> {
  const slash = path.lastIndexOf('/');
  const parent = slash <= 0 ? '/' : path.slice(0, slash);
  const base = path.slice(slash + 1);
  const { exec, socket } = await startExec(docker, containerId, ['tar', '-c', '-f', '-', '-C', parent, `./${base}`], false);
  return guardedStream(socket, (stdout, stderr) => demultiplex(socket, stdout, stderr), () => exitCode(exec),
    (code, text) => tarFailed(`reading ${path}`, containerId, code, text));
}
