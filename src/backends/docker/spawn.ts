import { randomBytes } from 'node:crypto';
import { PassThrough, Writable, type Duplex } from 'node:stream';
import type Dockerode from 'dockerode';
import { BerthError } from '../../errors.js';
import type { Logger } from '../../logging/logger.js';
import type { SpawnOptions } from '../backend.js';
import type { ShellTransport, SpawnedProcess } from '../../shell/transport.js';
import { execOnce } from '../plumbing/exec-once.js';
import { bounded, endedAtStart, ENGINE_REQUEST_TIMEOUT_MS, fromDockerError, hijacked } from './engine.js';
import { demultiplex, exitCodeOf, SHELL_TAG_ENV } from './exec-stream.js';

/** How long to ask the engine for an exec's exit code once its stream ended. */
const EXIT_WAIT_MS = 5_000;
/** Bound of the kill helper: a scan of /proc answers in milliseconds, seconds under a fork bomb. */
const KILL_TIMEOUT_MS = 5_000;
/** Output bound of the kill helper: it prints nothing, so anything big is a replaced shell. */
const KILL_HELPER_OUTPUT_BYTES = 64 * 1024;

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
 * Past `boundMs` without either, `started` is undefined: not known.
 */
export async function watchWardenStart(
  docker: Dockerode,
  containerId: string,
  boundMs: number,
): Promise<{ started: Promise<boolean | undefined>; close(): void }> {
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
  const started = new Promise<boolean | undefined>((resolve) => {
    timer = setTimeout(() => resolve(undefined), boundMs);
    timer.unref();
    let seen = '';
    stdout.on('data', (chunk: Buffer) => {
      seen = (seen + chunk.toString('latin1')).slice(-256);
      if (/(^|\n)warden \d+\n/.test(seen)) resolve(true);
    });
    stdout.once('end', () => resolve(false));
    stream.once('close', () => resolve(false));
    stream.once('error', () => resolve(false));
  });
  void started.then(() => clearTimeout(timer));
  return {
    started,
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
