import { randomBytes } from 'node:crypto';
import { closeSync, constants } from 'node:fs';
import { Socket } from 'node:net';
import { basename } from 'node:path';
import { PassThrough, Readable, Writable, type Duplex } from 'node:stream';
import type Dockerode from 'dockerode';
import { BerthError, TimeoutError } from '../../errors.js';
import type { Logger } from '../../logging/logger.js';
import type { SpawnOptions } from '../backend.js';
import type { ShellTransport, SpawnedProcess } from '../../shell/transport.js';
import { execOnce } from '../plumbing/exec-once.js';
import { openFifo } from '../plumbing/fifo-files.js';
import { unlinkFifos, type FifoPool } from '../plumbing/fifo-pool.js';
import { FILL_FAILED } from './container-spec.js';
import { bounded, endedAtStart, ENGINE_REQUEST_TIMEOUT_MS, fromDockerError, hijacked } from './engine.js';
import { demultiplex, exitCodeOf, SHELL_TAG_ENV } from './exec-stream.js';
import { STDIO_DIR } from './stdio-dir.js';

/** How long to ask the engine for an exec's exit code once its stream ended. */
const EXIT_WAIT_MS = 5_000;
/** Bound of the kill helper: a scan of /proc answers in milliseconds, seconds under a fork bomb. */
const KILL_TIMEOUT_MS = 5_000;
/** Output bound of the kill helper: it prints nothing, so anything big is a replaced shell. */
const KILL_HELPER_OUTPUT_BYTES = 64 * 1024;

/** How long a process started over FIFOs may take to open them (its `sh` wrapper's first step). */
const FIFO_OPEN_TIMEOUT_MS = 10_000;
/** How often the exec is asked whether it ended while its wrapper has not said it opened its FIFOs. */
const FIFO_OPEN_POLL_MS = 50;
/**
 * After a FIFO-stdio exec's process ended, what is left in its FIFOs is read: berth stops reading
 * once nothing came for DRAIN_QUIET_MS while it read, or after DRAIN_AFTER_EXIT_MS of reading (a
 * process it left may write on for ever). Time the reader held the output back does not count: a
 * slow consumer still gets every byte the program wrote. (An attach stream ends about as soon.)
 */
const DRAIN_QUIET_MS = 200;
const DRAIN_AFTER_EXIT_MS = 2_000;
const DRAIN_LOOK_MS = 50;
/** First and longest wait between asking the engine whether such an exec has ended. */
const EXIT_POLL_FIRST_MS = 250;
const EXIT_POLL_MAX_MS = 5_000;
/**
 * The wrapper of a process started over FIFOs: opens the status FIFO, then the process's stdio
 * (stdin, stdout, stderr: paths in the container's stdio dir), says so with one byte on the
 * status FIFO, lets go of it and becomes the process. An open that fails ends it (126) before
 * that byte. It runs under `bash`, as the sandbox's warden and shells do (every docker sandbox has
 * it): its `exec` looks the program up on PATH and keeps its name as given, as the engine's exec
 * would, where busybox's sh would run an applet of that name (`sh`, `tar`, `ps` ...) instead. In
 * POSIX mode it reads no startup file, not even BASH_ENV's: nothing runs before the program but
 * these lines (the variable still reaches the program, as every other of its environment).
 */
const FIFO_WRAPPER = 'exec 3>"$4" || exit 126; exec <"$1" >"$2" 2>"$3" || exit 126; builtin printf o >&3; exec 3>&-; shift 4; exec "$@"';

/** Where execs go and how their streams are kept track of. */
export interface ContainerTarget {
  docker: Dockerode;
  containerId: string;
  /** Called with each attach stream so the backend can destroy it on `close()`; returns the untrack. */
  track: (stream: Duplex) => () => void;
  log: Logger;
}

/**
 * Starts `argv` in the container through `docker exec` with its streams attached. Env values
 * travel only in the exec's `Env` field (never in `Cmd`), with a tag (`BERTH_SHELL_TAG`, the
 * caller's own when it sets one) that `kill()` finds the process tree by: closing an attach
 * stream does not end what runs in the container. It comes back with the process.
 */
export async function spawnInContainer(
  target: ContainerTarget, argv: readonly string[], opts: SpawnOptions & { killByTag?: boolean },
): Promise<SpawnedProcess & { tag: string }> {
  const { docker, containerId } = target;
  const tag = opts.env[SHELL_TAG_ENV] ?? randomBytes(8).toString('hex');
  const env = Object.entries({ ...opts.env, [SHELL_TAG_ENV]: tag }).map(([name, value]) => `${name}=${value}`);
  const doing = `run ${JSON.stringify(argv[0] ?? '')} in container ${containerId.slice(0, 12)}`;
  let exec: Dockerode.Exec;
  let stream: Duplex;
  try {
    exec = await bounded(docker, ENGINE_REQUEST_TIMEOUT_MS, doing, (abortSignal) => docker.getContainer(containerId).exec({
      Cmd: [...argv],
      Env: env,
      WorkingDir: opts.cwd,
      AttachStdin: opts.stdin,
      AttachStdout: true,
      AttachStderr: true,
      Tty: false,
      abortSignal,
    }));
    stream = await hijacked(docker, doing, (abortSignal) => exec.start({ hijack: true, stdin: opts.stdin, abortSignal }));
  } catch (err) {
    throw fromDockerError(docker, err, doing);
  }
  const { stdout, stderr, ended } = streamsOf(target, stream, `stream of ${JSON.stringify(argv[0] ?? '')}`);
  const exited = ended.then(() => exitCodeOf(exec, EXIT_WAIT_MS));
  const stdin = opts.stdin ? stdinOf(stream) : null;

  let killing: Promise<void> | undefined;
  const kill = (): Promise<void> => {
    killing ??= (async () => {
      if (opts.killByTag !== false) {
        try {
          await killTagged(target, tag);
        } catch (err) {
          target.log.debug(`could not kill the processes of ${JSON.stringify(argv[0] ?? '')}: ${(err as Error).message}`);
        }
      }
      stream.destroy();
      stdin?.destroy();
    })();
    return killing;
  };
  return { stdin, stdout, stderr, exited, kill, tag };
}

/**
 * Starts `argv` in the container through a detached `docker exec` whose stdio are FIFOs in the
 * container's stdio dir (see stdio-dir.ts), which berth holds the other ends of: each command's
 * input and output then go between berth and the process directly, never through the engine
 * (dockerd and the container's shim copy every byte of an attached exec, and at a thousand
 * sandboxes answering at once that copying is most of the time). Env, the tag and `kill` are as
 * `spawnInContainer`'s; the exit code is the exec's, asked once stdout and stderr ended.
 *
 * Berth's ends are open before the exec starts: stdin read-write (so the process's open never
 * waits), stdout and stderr read-only without reading (a FIFO read before its writer opened is
 * end-of-file), and the status FIFO read-write, on which the wrapper's one byte says the process
 * holds its stdio; only then are stdout and stderr read. An exec that ends before that byte
 * (its wrapper could not open a FIFO) fails the spawn, as does one that never says it within
 * FIFO_OPEN_TIMEOUT_MS (then it is killed). `exited` comes once stdout and stderr ended, so a
 * caller reads both (every caller does: a process whose output nobody reads blocks on it anyway).
 */
export async function spawnOverFifos(
  target: ContainerTarget, pool: FifoPool, argv: readonly string[], opts: SpawnOptions,
): Promise<SpawnedProcess & { tag: string }> {
  const { docker, containerId } = target;
  const tag = opts.env[SHELL_TAG_ENV] ?? randomBytes(8).toString('hex');
  const env = Object.entries({ ...opts.env, [SHELL_TAG_ENV]: tag }).map(([name, value]) => `${name}=${value}`);
  const doing = `run ${JSON.stringify(argv[0] ?? '')} in container ${containerId.slice(0, 12)}`;
  const set = await pool.take();
  const opened: number[] = [];
  const open = (path: string, flags: number): number => openFifo(path, flags | constants.O_NONBLOCK, opened);
  let handedOver = false;
  try {
    const fds = {
      stdout: open(set.stdout, constants.O_RDONLY),
      stderr: open(set.stderr, constants.O_RDONLY),
      status: open(set.status, constants.O_RDWR),
      stdin: opts.stdin ? open(set.stdin, constants.O_RDWR) : undefined,
    };
    const inside = (p: string): string => `${STDIO_DIR}/${basename(p)}`;
    let exec: Dockerode.Exec;
    try {
      exec = await bounded(docker, ENGINE_REQUEST_TIMEOUT_MS, doing, (abortSignal) => docker.getContainer(containerId).exec({
        Cmd: ['bash', '--posix', '--noprofile', '--norc', '-c', FIFO_WRAPPER, 'berth-stdio', opts.stdin ? inside(set.stdin) : '/dev/null', inside(set.stdout), inside(set.stderr), inside(set.status), ...argv],
        Env: env,
        WorkingDir: opts.cwd,
        AttachStdin: false,
        AttachStdout: false,
        AttachStderr: false,
        Tty: false,
        abortSignal,
      }));
      const answer: unknown = await bounded(docker, ENGINE_REQUEST_TIMEOUT_MS, doing, (abortSignal) => exec.start({ Detach: true, abortSignal }));
      // Its (empty) answer comes as a stream: read to its end, or its connection stays busy and
      // keeps berth's process alive.
      if (answer instanceof Readable) answer.resume();
    } catch (err) {
      throw fromDockerError(docker, err, doing);
    }
    const status = new Socket({ fd: fds.status, readable: true, writable: false });
    opened.splice(opened.indexOf(fds.status), 1);
    const holds = await wrapperOpened(status, exec, target, tag, doing);
    if (holds !== true) throw holds;
    const stdout = new Socket({ fd: fds.stdout, readable: true, writable: false });
    const stderr = new Socket({ fd: fds.stderr, readable: true, writable: false });
    const stdin = fds.stdin === undefined ? null : new Socket({ fd: fds.stdin, readable: false, writable: true });
    handedOver = true;
    // Tracked as the attach streams are: the backend's close lets go of them (a job the process
    // left may hold its output open long after it ended, and an open FIFO keeps berth's process alive).
    for (const s of [stdout, stderr, stdin]) if (s !== null) s.once('close', target.track(s));
    stdin?.on('error', () => undefined);
    for (const s of [stdout, stderr]) s.on('error', (err) => target.log.debug(`output of ${JSON.stringify(argv[0] ?? '')} failed: ${err.message}`));
    const closed = (s: Socket): Promise<void> => new Promise((resolve) => (s.closed ? resolve() : s.once('close', () => resolve())));
    const bothClosed = Promise.all([closed(stdout), closed(stderr)]);
    // A process the program left (`cmd &`) may hold its output open after it ended, and a FIFO
    // ends only when its last writer closes: the exec's end is asked for, and once it ended what
    // is left in the FIFOs is read before berth stops reading, as an attach stream ends. Not for a
    // lasting process (a shell): its end shows in its protocol, its timeouts and its warden, and
    // a thousand live shells cost the engine no polling.
    if (opts.lasting !== true) {
      void endWhenExited(exec, bothClosed, [stdout, stderr], () => {
        target.log.debug(`${JSON.stringify(argv[0] ?? '')} in container ${containerId.slice(0, 12)} ended, but a process it left still held its output; stopped reading it`);
        stdout.destroy();
        stderr.destroy();
      });
    }
    const exited = bothClosed.then(() => {
      // As an attach stream's stdin goes with its stream: an open FIFO would keep berth's process alive.
      stdin?.destroy();
      return exitCodeOf(exec, EXIT_WAIT_MS);
    });
    let killing: Promise<void> | undefined;
    const kill = (): Promise<void> => {
      killing ??= (async () => {
        try {
          await killTagged(target, tag);
        } catch (err) {
          target.log.debug(`could not kill the processes of ${JSON.stringify(argv[0] ?? '')}: ${(err as Error).message}`);
        }
        stdout.destroy();
        stderr.destroy();
        stdin?.destroy();
      })();
      return killing;
    };
    return { stdin, stdout, stderr, exited, kill, tag, hostPipes: true };
  } finally {
    if (!handedOver) for (const fd of opened) closeSync(fd);
    unlinkFifos(set);
  }
}

/**
 * Calls `stop` once `exec` has ended and what was left in `streams` was read (see
 * DRAIN_QUIET_MS), unless `closed` (its output ended) came first. Asks the engine at growing
 * intervals meanwhile; a failed ask is asked again.
 */
async function endWhenExited(exec: Dockerode.Exec, closed: Promise<unknown>, streams: readonly Socket[], stop: () => void): Promise<void> {
  let done = false;
  void closed.then(() => (done = true));
  const pause = (ms: number): Promise<unknown> => Promise.race([closed, new Promise((resolve) => setTimeout(resolve, ms).unref())]);
  for (let wait = EXIT_POLL_FIRST_MS; ; wait = Math.min(wait * 2, EXIT_POLL_MAX_MS)) {
    await pause(wait);
    if (done) return;
    const info = await exec.inspect({ abortSignal: AbortSignal.timeout(ENGINE_REQUEST_TIMEOUT_MS) }).catch(() => undefined);
    if (done) return;
    if (info !== undefined && !info.Running) break;
  }
  // Progress read from the sockets' counts (a listener added here would start a stream its
  // reader has not started, and the bytes would be lost to it).
  const count = (): number => streams.reduce((n, s) => n + s.bytesRead, 0);
  let [lastData, lastCount] = [Date.now(), count()];
  for (let reading = 0; ; ) {
    await pause(DRAIN_LOOK_MS);
    if (done) return;
    const now = count();
    if (now !== lastCount || streams.some((s) => s.readableFlowing !== true)) [lastData, lastCount] = [Date.now(), now];
    // Time its reader held the output back does not count.
    if (streams.some((s) => s.readableFlowing !== true)) continue;
    reading += DRAIN_LOOK_MS;
    if (Date.now() - lastData >= DRAIN_QUIET_MS || reading >= DRAIN_AFTER_EXIT_MS) break;
  }
  stop();
}

/**
 * True once the wrapper said it holds its stdio (the status FIFO's one byte); else the error to
 * fail the spawn with: the exec ended first (a FIFO could not be opened), or it said nothing in
 * time (then its processes are killed). Closes `status` either way.
 */
async function wrapperOpened(status: Socket, exec: Dockerode.Exec, target: ContainerTarget, tag: string, doing: string): Promise<true | Error> {
  let said: () => void = () => undefined;
  const byte = new Promise<void>((resolve) => (said = resolve));
  status.once('data', () => said());
  status.on('error', () => undefined);
  const deadline = Date.now() + FIFO_OPEN_TIMEOUT_MS;
  try {
    for (;;) {
      const timer = new Promise<'later'>((resolve) => setTimeout(() => resolve('later'), FIFO_OPEN_POLL_MS));
      if ((await Promise.race([byte.then(() => 'said' as const), timer])) === 'said') return true;
      let info: Dockerode.ExecInspectInfo | undefined;
      try {
        info = await exec.inspect({ abortSignal: AbortSignal.timeout(ENGINE_REQUEST_TIMEOUT_MS) });
      } catch {
        // Asked again next round; the deadline bounds it.
      }
      if (info !== undefined && !info.Running) {
        // The byte may have come with the end.
        if ((await Promise.race([byte.then(() => 'said' as const), new Promise((r) => setImmediate(r))])) === 'said') return true;
        return new BerthError('spawn_failed', `could not ${doing}: the process could not open its stdio in the container's ${STDIO_DIR} (exit code ${info.ExitCode ?? 'unknown'})`);
      }
      if (Date.now() >= deadline) {
        await killTagged(target, tag).catch(() => undefined);
        return new TimeoutError(`could not ${doing}: the process did not open its stdio within ${FIFO_OPEN_TIMEOUT_MS} ms`);
      }
    }
  } finally {
    status.destroy();
  }
}

/**
 * Attaches to the container's main process (berth's resident warden, see container-spec.ts): its
 * stdin and its output, demultiplexed. Several attachments may be open at once (every one sees all
 * output); `kill` only ends this one, never the process, whose stdin the engine keeps open.
 */
export async function attachMainProcess(target: ContainerTarget): Promise<ShellTransport> {
  const { docker, containerId } = target;
  const doing = `attach to the warden of container ${containerId.slice(0, 12)}`;
  // The engine lets an attach to a stopped container wait for its next start: ask first, so a
  // warden that ended (and took its container with it) fails the call now, as an exec would.
  const info = await bounded(docker, ENGINE_REQUEST_TIMEOUT_MS, doing, (abortSignal) => docker.getContainer(containerId).inspect({ abortSignal }))
    .catch((err: unknown) => { throw fromDockerError(docker, err, doing); });
  const state = info.State;
  // A container whose init could not start bash (127) ended as it started: say why, as the start does.
  if (!state.Running && state.ExitCode === 127) throw endedAtStart(info.Config.Image, state);
  if (!state.Running || state.Paused) {
    throw new BerthError('engine_refused', `could not ${doing}: the container is ${state.Paused ? 'paused' : 'not running'}`);
  }
  let stream: Duplex;
  try {
    stream = await hijacked(docker, doing, (abortSignal) => docker.getContainer(containerId).attach({
      stream: true, stdin: true, stdout: true, stderr: true, hijack: true, abortSignal,
    }));
  } catch (err) {
    throw fromDockerError(docker, err, doing);
  }
  const { stdout, stderr, ended } = streamsOf(target, stream, 'warden attachment');
  const exited = ended.then(() => null);
  const stdin = stdinOf(stream);
  return {
    stdin, stdout, stderr, exited,
    kill: async () => {
      stream.destroy();
      stdin.destroy();
    },
  };
}

/**
 * Watches a container with a resident warden through its start: attached before the start (output
 * only), `started` is true once the warden's first line (`warden PID`) came, so its bash runs, and
 * false when the output ended first: the main process ended as it started (no bash in the image,
 * say). An inspect right after the start cannot tell, since the init may fail a moment later.
 * Past `boundMs` without either, `started` is undefined: not known. A sandbox filled as it starts
 * that could not unpack its archive says so in a line of its own: `started` is false and
 * `fillFailure()` is what tar said.
 */
export async function watchWardenStart(
  docker: Dockerode,
  containerId: string,
  boundMs: number,
): Promise<{ started: Promise<boolean | undefined>; fillFailure(): string | undefined; close(): void }> {
  const doing = `attach to container ${containerId.slice(0, 12)} before its start`;
  let stream: Duplex;
  try {
    stream = await hijacked(docker, doing, (abortSignal) => docker.getContainer(containerId).attach({
      stream: true, stdout: true, stderr: true, hijack: true, abortSignal,
    }));
  } catch (err) {
    throw fromDockerError(docker, err, doing);
  }
  const stdout = new PassThrough();
  const stderr = new PassThrough();
  demultiplex(stream, stdout, stderr);
  stderr.resume();
  let timer: NodeJS.Timeout | undefined;
  let fillFailure: string | undefined;
  const started = new Promise<boolean | undefined>((resolve) => {
    timer = setTimeout(() => resolve(undefined), boundMs);
    timer.unref();
    let seen = '';
    stdout.on('data', (chunk: Buffer) => {
      // Room for the longest failure line (FILL_PREFIX: 400 characters of up to 4 bytes, and its head).
      seen = (seen + chunk.toString('latin1')).slice(-4096);
      if (/(^|\n)warden \d+\n/.test(seen)) resolve(true);
      const failed = new RegExp(`(?:^|\n)${FILL_FAILED} ([^\n]*)\n`).exec(seen);
      if (failed !== null) {
        fillFailure = Buffer.from(failed[1]!, 'latin1').toString('utf8').trim();
        resolve(false);
      }
    });
    stdout.once('end', () => resolve(false));
    stream.once('close', () => resolve(false));
    stream.once('error', () => resolve(false));
  });
  void started.then(() => clearTimeout(timer));
  return {
    started,
    fillFailure: () => fillFailure,
    close: () => {
      clearTimeout(timer);
      stream.destroy();
    },
  };
}

/**
 * The demultiplexed output of a hijacked stream, tracked by the backend until it ends; `ended`
 * resolves once it closed, ended or failed (the failure is logged as `what`).
 */
function streamsOf(target: ContainerTarget, stream: Duplex, what: string): { stdout: PassThrough; stderr: PassThrough; ended: Promise<void> } {
  const untrack = target.track(stream);
  const stdout = new PassThrough();
  const stderr = new PassThrough();
  demultiplex(stream, stdout, stderr);
  stream.on('error', (err) => target.log.debug(`${what} failed: ${err.message}`));
  const ended = new Promise<void>((resolve) => {
    stream.once('close', () => resolve());
    stream.once('end', () => resolve());
    stream.once('error', () => resolve());
  }).then(untrack);
  return { stdout, stderr, ended };
}

/** A writable onto the attach stream; ending it half-closes the stream, which the engine turns into EOF on stdin. */
function stdinOf(stream: Duplex): Writable {
  const stdin = new Writable({
    write(chunk: Buffer, _encoding, callback) {
      if (stream.destroyed || stream.writableEnded) {
        callback(new Error('the process\'s stream is closed'));
        return;
      }
      stream.write(chunk, callback);
    },
    final(callback) {
      if (!stream.destroyed && !stream.writableEnded) stream.end();
      callback();
    },
  });
  // A write racing the stream's death must not crash berth; `exited` reports it.
  stdin.on('error', () => undefined);
  stream.once('close', () => stdin.destroy());
  return stdin;
}

/**
 * Kill every process in the container that carries `tag` in its environment: the process and
 * the children that inherited it. Two passes catch children forked during the first.
 * `/bin/sh` by absolute path, so a `sh` earlier on the agent's PATH does not stand in for it; the
 * helper itself is ended by closing its stream (it is not tagged with what it kills).
 */
async function killTagged(target: ContainerTarget, tag: string): Promise<void> {
  const script =
    'for pass in 1 2; do for d in /proc/[0-9]*; do ' +
    'if tr "\\000" "\\n" < "$d/environ" 2>/dev/null | grep -qxF "$1=$2"; then kill -9 "${d#/proc/}" 2>/dev/null; fi; ' +
    'done; done; true';
  await execOnce(
    (argv, o) => spawnInContainer(target, argv, { ...o, killByTag: false }),
    ['/bin/sh', '-c', script, 'berth-kill', SHELL_TAG_ENV, tag],
    { timeoutMs: KILL_TIMEOUT_MS, maxOutputBytes: KILL_HELPER_OUTPUT_BYTES },
    `container ${target.containerId.slice(0, 12)}`,
  );
}
