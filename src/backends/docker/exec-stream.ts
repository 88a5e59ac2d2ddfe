import { randomBytes } from 'node:crypto';
import { PassThrough, Writable, type Duplex, type Readable } from 'node:stream';
import type Dockerode from 'dockerode';
import { TimeoutError } from '../../errors.js';
import { helperOutputCap, helperOutputTooLarge, type ExecOnceResult, type ShellTransport } from '../backend.js';
import { bounded, ENGINE_REQUEST_TIMEOUT_MS, fromDockerError, startAttached, withTimeout } from './engine.js';

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
      const info = await exec.inspect({ abortSignal: AbortSignal.timeout(Math.max(1, deadline - Date.now()) + 1_000) });
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
  // The shell layer tags its shells itself (the same variable); a tag of ours otherwise.
  const tag = input.env[SHELL_TAG_ENV] ?? randomBytes(8).toString('hex');
  const env = Object.entries({ ...input.env, [SHELL_TAG_ENV]: tag }).map(([name, value]) => `${name}=${value}`);
  let socket: Duplex;
  let exec: Dockerode.Exec;
  const doing = `start a shell in container ${containerId.slice(0, 12)}`;
  try {
    exec = await bounded(docker, ENGINE_REQUEST_TIMEOUT_MS, doing, (abortSignal) => docker.getContainer(containerId).exec({
      Cmd: ['bash', '--noprofile', '--norc'],
      Env: env,
      WorkingDir: input.cwd,
      AttachStdin: true,
      AttachStdout: true,
      AttachStderr: true,
      Tty: false,
      abortSignal,
    }));
    socket = await startAttached(docker, exec, true, doing);
  } catch (err) {
    throw fromDockerError(docker, err, doing);
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

/** Output bound of the kill helper: it prints nothing, so anything big is a replaced shell. */
const KILL_HELPER_OUTPUT_BYTES = 64 * 1024;

/**
 * Kill every process in the container that carries this shell's tag in its environment: the
 * shell and the children that inherited it. Two passes catch children forked during the first.
 * `/bin/sh` by absolute path, so a `sh` earlier on the agent's PATH does not stand in for it.
 */
async function killTagged(docker: Dockerode, containerId: string, tag: string): Promise<void> {
  const script =
    'for pass in 1 2; do for d in /proc/[0-9]*; do ' +
    'if tr "\\000" "\\n" < "$d/environ" 2>/dev/null | grep -qxF "$1=$2"; then kill -9 "${d#/proc/}" 2>/dev/null; fi; ' +
    'done; done; true';
  await execOnceIn(docker, containerId, ['/bin/sh', '-c', script, 'berth-kill', SHELL_TAG_ENV, tag], {
    timeoutMs: 5_000,
    killHelper: false,
    maxOutputBytes: KILL_HELPER_OUTPUT_BYTES,
  });
}

export interface ExecOnceInOptions {
  timeoutMs: number;
  /** Kill the helper's processes (by tag) when it times out or floods output; false for the kill helper itself. */
  killHelper?: boolean;
  /** Bound on collected stdout + stderr; see `ExecOnceOptions.maxOutputBytes`. */
  maxOutputBytes?: number;
}

/**
 * Run `argv` once in the container, collect its demultiplexed output and exit code. On timeout
 * the helper's processes (found by their tag) are killed and a TimeoutError is thrown. Output
 * past `maxOutputBytes` (stdout + stderr) is not kept: the stream is destroyed at once (nothing
 * more is read), the helper is killed by its tag, and a `helper_output_too_large` error is thrown.
 */
export async function execOnceIn(
  docker: Dockerode,
  containerId: string,
  argv: string[],
  opts: ExecOnceInOptions,
): Promise<ExecOnceResult> {
  const { timeoutMs } = opts;
  const killHelper = opts.killHelper ?? true;
  const cap = helperOutputCap(opts);
  const where = `container ${containerId.slice(0, 12)}`;
  const controller = new AbortController();
  const tag = randomBytes(8).toString('hex');
  const endHelper = (): void => {
    controller.abort();
    // Closing the stream does not end the process: kill what this helper started, in the background.
    if (killHelper) killTagged(docker, containerId, tag).catch(() => undefined);
  };
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
      throw fromDockerError(docker, err, `exec ${argv[0] ?? ''} in ${where}`);
    }
    if (controller.signal.aborted) stream.destroy();
    else controller.signal.addEventListener('abort', () => stream.destroy(), { once: true });
    const stdout = new PassThrough();
    const stderr = new PassThrough();
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    let collected = 0;
    let overflow = false;
    let overflowed: () => void = () => undefined;
    const overflowP = new Promise<void>((resolve) => {
      overflowed = resolve;
    });
    const collect = (into: Buffer[]) => (c: Buffer): void => {
      if (overflow) return;
      collected += c.length;
      if (collected > cap) {
        overflow = true;
        out.length = 0;
        err.length = 0;
        endHelper();
        overflowed();
        return;
      }
      into.push(c);
    };
    stdout.on('data', collect(out));
    stderr.on('data', collect(err));
    const done = Promise.all([
      new Promise((resolve) => stdout.once('end', resolve)),
      new Promise((resolve) => stderr.once('end', resolve)),
    ]);
    demultiplex(stream, stdout, stderr);
    await Promise.race([done, overflowP]);
    if (overflow) throw helperOutputTooLarge(argv, where, cap);
    const exitCode = await exitCodeOf(exec, 1_000);
    return { exitCode: exitCode ?? -1, stdout: Buffer.concat(out), stderr: Buffer.concat(err) };
  };
  try {
    return await withTimeout(run(), timeoutMs, () => {
      endHelper();
      return new TimeoutError(`helper ${JSON.stringify(argv[0] ?? '')} in ${where} did not finish within ${timeoutMs} ms`);
    });
  } finally {
    if (!controller.signal.aborted) controller.abort();
  }
}
