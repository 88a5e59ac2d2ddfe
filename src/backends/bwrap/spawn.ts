import { closeSync } from 'node:fs';
import type { Readable, Writable } from 'node:stream';
import { BerthError, TimeoutError } from '../../errors.js';
import type { SpawnOptions } from '../backend.js';
import { openHostEnds, streamsOf, unlinkFifos, type FifoPool, type HostEnds, type HostFds } from '../plumbing/fifo-pool.js';
import { parseExitStatus, type InitEvent } from './init-events.js';
import { encodeKill, encodeSpawn } from './init-script.js';
import { SANDBOX_WORKSPACE } from './layout.js';

/** A process running in a sandbox, started by its init loop. */
export interface SandboxProcess {
  /** Its pid inside the sandbox (also its process group). */
  readonly pid: number;
  /** Undefined when spawned without stdin. */
  readonly stdin: Writable | undefined;
  readonly stdout: Readable;
  readonly stderr: Readable;
  /**
   * Its exit status (128+n after signal n); null when its watcher was killed first (the sandbox
   * ended, or everything in it was killed).
   */
  readonly exited: Promise<number | null>;
  /** Signals its process group (SIGKILL by default) and waits for it to end. Never throws. */
  kill(signal?: 'KILL' | 'TERM' | 'INT' | 'HUP'): Promise<void>;
}

/** A sandbox's init loop (see init-script.ts) as starting a process in it needs it. */
export interface InitLoop {
  /** The sandbox's FIFO sets, made ahead. */
  readonly fifos: FifoPool;
  /** True once bwrap exited: nothing starts any more, and no pid may be signalled. */
  gone(): boolean;
  /** Writes one request to the loop's control pipe. */
  send(request: Buffer): void;
  /** Calls `on` with the next event about `id`, or `gone` when the sandbox ends first. */
  listen(id: string, on: (e: InitEvent | { kind: 'gone' }) => void): void;
  forget(id: string): void;
}

const SPAWN_TIMEOUT_MS = 10_000;

/**
 * Starts `argv` in the sandbox with exactly `env` (values never on any argv) in `cwd` (it must
 * exist; default /workspace). Resolves once it runs; rejects if the sandbox is gone, the cwd is
 * missing or the env cannot be given.
 */
export async function spawnThroughInit(loop: InitLoop, argv: readonly string[], opts: SpawnOptions): Promise<SandboxProcess> {
  if (loop.gone()) throw new BerthError('not_found', 'the bwrap sandbox has ended');
  const cwd = opts.cwd ?? SANDBOX_WORKSPACE;
  const fifos = await loop.fifos.take();
  const id = fifos.id;
  const request = encodeSpawn({ id, cwd, stdin: opts.stdin ? 'pipe' : 'null', argv, env: opts.env });
  let fds: HostFds | undefined;
  try {
    fds = openHostEnds(fifos, opts.stdin);
    const first = await new Promise<InitEvent | { kind: 'gone' }>((resolve, reject) => {
      const timer = setTimeout(() => {
        // Should it start after all, nobody holds its stdio: end it when it says it runs.
        loop.listen(id, (late) => {
          loop.forget(id);
          if (late.kind === 'started' && !loop.gone()) loop.send(encodeKill(late.pid, 'KILL'));
        });
        reject(new TimeoutError(`a process in the bwrap sandbox did not start within ${SPAWN_TIMEOUT_MS} ms`));
      }, SPAWN_TIMEOUT_MS);
      loop.listen(id, (e) => {
        loop.forget(id);
        clearTimeout(timer);
        resolve(e);
      });
      loop.send(request);
    });
    if (first.kind === 'failed') throw spawnFailure(first.what, cwd, argv);
    if (first.kind !== 'started') throw new BerthError('not_found', 'the bwrap sandbox ended before the process started');
    const ends = streamsOf(fds);
    fds = undefined;
    return processHandle(loop, first.pid, ends);
  } finally {
    if (fds !== undefined) for (const fd of [fds.stdin, fds.stdout, fds.stderr, fds.status]) if (fd !== undefined) closeSync(fd);
    unlinkFifos(fifos);
  }
}

function processHandle(loop: InitLoop, pid: number, ends: HostEnds): SandboxProcess {
  ends.stdin?.on('error', () => undefined);
  const exited = new Promise<number | null>((resolve) => {
    let text = '';
    ends.status.setEncoding('latin1');
    ends.status.on('data', (d: string) => {
      if (text.length < 16) text += d;
    });
    ends.status.on('error', () => undefined);
    ends.status.on('close', () => resolve(parseExitStatus(text)));
  });
  let ended = false;
  void exited.then(() => {
    ended = true;
  });
  return {
    pid,
    stdin: ends.stdin,
    stdout: ends.stdout,
    stderr: ends.stderr,
    exited,
    kill: async (signal = 'KILL') => {
      // Once it ended its pid may be another process's: no signal then.
      if (!ended && !loop.gone()) loop.send(encodeKill(pid, signal));
      await exited;
    },
  };
}

function spawnFailure(what: string, cwd: string, argv: readonly string[]): BerthError {
  if (what === 'cwd') return new BerthError('spawn_failed', `working directory ${cwd} does not exist in the sandbox (or is not a directory)`);
  if (what === 'env') return new BerthError('spawn_failed', `the environment for ${JSON.stringify(argv[0])} could not be set in the sandbox`);
  return new BerthError('spawn_failed', `the sandbox could not open the stdio of ${JSON.stringify(argv[0])}`);
}
