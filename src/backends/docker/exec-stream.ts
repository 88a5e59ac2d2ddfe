import { randomBytes } from 'node:crypto';
import { PassThrough, Writable, type Duplex, type Readable } from 'node:stream';
import type Dockerode from 'dockerode';
import { TimeoutError } from '../../errors.js';
import type { ExecOnceResult, ShellTransport } from '../backend.js';
import { fromDockerError, withTimeout } from './engine.js';

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
async function exitCodeOf(exec: Dockerode.Exec, timeoutMs: number): Promise<number | null> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      const info = await exec.inspect();
      if (!info.Running) return info.ExitCode ?? null;
    } catch {
      return null;
    }
    if (Date.now() >= deadline) return null;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

export interface OpenShellInput {
  docker: Dockerode;
  containerId: string;
  env: Readonly<Record<string, string>>;
  cwd: string;
  /** Called with the attach socket so the backend can destroy it on `close()`. */
  track: (socket: Duplex) => () => void;
  log: (msg: string) => void;
}

/**
 * Start `bash --noprofile --norc` through `docker exec` and attach to its stdin/stdout/stderr.
 * Env values travel only in the exec's `Env` field; nothing secret is placed in `Cmd`.
 */
export async function openShellExec(input: OpenShellInput): Promise<ShellTransport> {
  const { docker, containerId } = input;
  const tag = randomBytes(8).toString('hex');
  const env = Object.entries(input.env).map(([name, value]) => `${name}=${value}`);
  env.push(`${SHELL_TAG_ENV}=${tag}`);
  let socket: Duplex;
  let exec: Dockerode.Exec;
  try {
    exec = await docker.getContainer(containerId).exec({
      Cmd: ['bash', '--noprofile', '--norc'],
      Env: env,
      WorkingDir: input.cwd,
      AttachStdin: true,
      AttachStdout: true,
      AttachStderr: true,
      Tty: false,
    });
    socket = await exec.start({ hijack: true, stdin: true });
  } catch (err) {
    throw fromDockerError(docker, err, `start a shell in container ${containerId.slice(0, 12)}`);
  }
  const untrack = input.track(socket);
  const stdout = new PassThrough();
  const stderr = new PassThrough();
  demultiplex(socket, stdout, stderr);

  const streamDone = new Promise<void>((resolve) => {
    socket.once('close', () => resolve());
    socket.once('end', () => resolve());
    socket.once('error', () => resolve());
  });
  const exited = streamDone.then(async () => {
    untrack();
    return exitCodeOf(exec, 2_000);
  });

  const stdin = new Writable({
    write(chunk: Buffer, _encoding, callback) {
      if (socket.destroyed || socket.writableEnded) {
        callback(new Error('shell stream is closed'));
        return;
      }
      socket.write(chunk, callback);
    },
    final(callback) {
      // Half-close: the engine turns it into EOF on the shell's stdin.
      if (!socket.destroyed && !socket.writableEnded) socket.end();
      callback();
    },
  });
  // A write racing the stream's death must not crash the process; `exited` reports it.
  stdin.on('error', () => undefined);
  socket.on('error', (err) => input.log(`shell stream of ${containerId.slice(0, 12)} failed: ${err.message}`));

  let killing: Promise<void> | undefined;
  const kill = (): Promise<void> => {
    killing ??= (async () => {
      try {
        await killTagged(docker, containerId, tag);
      } catch (err) {
        input.log(`could not kill shell in ${containerId.slice(0, 12)}: ${(err as Error).message}`);
      }
      socket.destroy();
      stdin.destroy();
    })();
    return killing;
  };

  return { stdin, stdout, stderr, exited, kill };
}

/**
 * Kill every process in the container that carries this shell's tag in its environment: the
 * shell and the children that inherited it. Two passes catch children forked during the first.
 */
async function killTagged(docker: Dockerode, containerId: string, tag: string): Promise<void> {
  const script =
    'for pass in 1 2; do for d in /proc/[0-9]*; do ' +
    'if tr "\\000" "\\n" < "$d/environ" 2>/dev/null | grep -qxF "$1=$2"; then kill -9 "${d#/proc/}" 2>/dev/null; fi; ' +
    'done; done; true';
  await execOnceIn(docker, containerId, ['sh', '-c', script, 'berth-kill', SHELL_TAG_ENV, tag], 5_000, false);
}

/**
 * Run `argv` once in the container, collect its demultiplexed output and exit code. On timeout
 * the helper's processes (found by their tag) are killed and a TimeoutError is thrown.
 */
export async function execOnceIn(
  docker: Dockerode,
  containerId: string,
  argv: string[],
  timeoutMs: number,
  killOnTimeout = true,
): Promise<ExecOnceResult> {
  const controller = new AbortController();
  const tag = randomBytes(8).toString('hex');
  const run = async (): Promise<ExecOnceResult> => {
    let stream: Readable;
    let exec: Dockerode.Exec;
    try {
      exec = await docker.getContainer(containerId).exec({
        Cmd: argv,
        Env: [`${SHELL_TAG_ENV}=${tag}`],
        AttachStdin: false,
        AttachStdout: true,
        AttachStderr: true,
        Tty: false,
        abortSignal: controller.signal,
      });
      stream = (await exec.start({ hijack: false, abortSignal: controller.signal })) as Readable;
    } catch (err) {
      throw fromDockerError(docker, err, `exec ${argv[0] ?? ''} in container ${containerId.slice(0, 12)}`);
    }
    controller.signal.addEventListener('abort', () => stream.destroy(), { once: true });
    const stdout = new PassThrough();
    const stderr = new PassThrough();
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    stdout.on('data', (c: Buffer) => out.push(c));
    stderr.on('data', (c: Buffer) => err.push(c));
    const done = Promise.all([
      new Promise((resolve) => stdout.once('end', resolve)),
      new Promise((resolve) => stderr.once('end', resolve)),
    ]);
    demultiplex(stream, stdout, stderr);
    await done;
    const exitCode = await exitCodeOf(exec, 1_000);
    return { exitCode: exitCode ?? -1, stdout: Buffer.concat(out), stderr: Buffer.concat(err) };
  };
  try {
    return await withTimeout(run(), timeoutMs, () => {
      controller.abort();
      // Closing the stream does not end the process: kill what this helper started, in the background.
      if (killOnTimeout) killTagged(docker, containerId, tag).catch(() => undefined);
      return new TimeoutError(
        `helper ${JSON.stringify(argv[0] ?? '')} in container ${containerId.slice(0, 12)} did not finish within ${timeoutMs} ms`,
      );
    });
  } finally {
    if (!controller.signal.aborted) controller.abort();
  }
}
