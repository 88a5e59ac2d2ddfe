import { spawn, type ChildProcess } from 'node:child_process';
import { readlinkSync } from 'node:fs';
import type { Readable, Writable } from 'node:stream';
import { BackendUnavailableError, BerthError, TimeoutError } from '../../errors.js';
import type { SpawnOptions } from '../backend.js';
import { bwrapArgs } from './bwrap-args.js';
import { FifoPool } from '../plumbing/fifo-pool.js';
import { INIT_SCRIPT } from './init-script.js';
import { readInitEvents, type InitEvent } from './init-events.js';
import { spawnThroughInit, type InitLoop, type SandboxProcess } from './spawn.js';
import { groupFile, hostsFile, nsswitchFile, passwdFile, type SandboxDirs } from './layout.js';
import { etcForNetwork, type SystemPath } from './system-paths.js';

export interface StartSandboxOptions {
  /** Absolute path of bwrap (the probe found it). */
  bwrapPath: string;
  /** bash as the sandbox sees it (the host's system paths are bound as they are). */
  bashPath: string;
  dirs: SandboxDirs;
  /** A host dir bound at /workspace instead of `dirs.workspace` (the attached workspace). */
  workspace?: string | undefined;
  /** Host uid:gid the sandbox runs as; undefined runs it as berth's own uid (berth is not root). */
  user: { uid: number; gid: number } | undefined;
  network: 'none' | 'host';
  /** The BPF program; undefined only when the operator opted out of the filter explicitly. */
  seccomp: Buffer | undefined;
  hostname: string;
  /** Size of each of the /tmp and /dev/shm tmpfs (memory). */
  tmpSizeBytes: number;
  /** RLIMIT_NPROC inside: processes and threads the sandbox's uid may hold in its own namespace. */
  maxProcesses: number;
  systemPaths: readonly SystemPath[];
  startTimeoutMs?: number;
  /**
   * Called with bwrap's own host pid (the monitor, outside the sandbox's namespaces) right after
   * it was spawned, before the sandbox runs anything: a caller's slow step (a cgroup move) can
   * start while bwrap sets the sandbox up.
   */
  spawned?: (monitorPid: number) => void;
  /**
   * FIFO sets for its processes, made ahead in `dirs.run` by a pool the caller keeps across the
   * sandbox's starts (a hibernated sandbox's next start takes the sets its last one left unused);
   * stopping only waits for a batch being made. Absent: a pool of its own, closed when it stops.
   */
  fifos?: FifoPool | undefined;
}

const DEFAULT_START_TIMEOUT_MS = 10_000;
const STDERR_KEEP = 4096;
const GONE_WAIT_MS = 5_000;
/* How long a failed start waits for the rest of what bwrap wrote on stderr after its exit was seen. */
const LAST_WORDS_WAIT_MS = 2_000;
/* fd numbers in bwrap's process; 3 and 4 reach the init loop, the rest bwrap consumes. */
const FD = { control: 3, events: 4, info: 5, seccomp: 6, passwd: 7, group: 8, hosts: 9, nsswitch: 10 } as const;

/**
 * Starts one sandbox: bwrap with its namespaces, mounts and filter, running the init loop that
 * starts every later process of the sandbox (see init-script.ts). Resolves once the loop answers.
 * A failed start leaves no process behind and rejects with what bwrap said.
 *
 * @example
 * await using sb = await startSandbox({ bwrapPath, bashPath, dirs, user: { uid, gid }, network: 'none',
 *   seccomp: seccompProgram(), hostname: 'berth', tmpSizeBytes: 256 << 20, maxProcesses: 512, systemPaths: hostSystemPaths() });
 * const p = await sb.spawn(['bash', '--noprofile', '--norc'], { env: { PATH: '/usr/bin:/bin' }, stdin: true });
 */
export async function startSandbox(opts: StartSandboxOptions): Promise<BwrapSandbox> {
  const args = bwrapArgs({
    binds: { workspace: opts.workspace ?? opts.dirs.workspace, home: opts.dirs.home, run: opts.dirs.run },
    systemPaths: etcForNetwork(opts.systemPaths, opts.network),
    network: opts.network,
    hostname: opts.hostname,
    tmpSizeBytes: opts.tmpSizeBytes,
    fds: {
      info: FD.info, passwd: FD.passwd, group: FD.group, hosts: FD.hosts, nsswitch: FD.nsswitch,
      seccomp: opts.seccomp === undefined ? undefined : FD.seccomp,
    },
    command: [opts.bashPath, '--noprofile', '--norc', '-c', `ulimit -Su ${opts.maxProcesses} -Hu ${opts.maxProcesses} || exit 1\n${INIT_SCRIPT}`, 'berth-init'],
  });
  const stdio = ['ignore', 'ignore', 'pipe', 'pipe', 'pipe', 'pipe', opts.seccomp === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe', 'pipe', 'pipe'] as const;
  // bwrap gets no environment of berth's: the init loop gives each process exactly the env it is asked for.
  const child = spawn(opts.bwrapPath, args, {
    cwd: '/',
    env: {},
    stdio: [...stdio],
    ...(opts.user === undefined ? {} : { uid: opts.user.uid, gid: opts.user.gid }),
  });
  const fifos = opts.fifos ?? new FifoPool(opts.dirs.run, opts.user);
  const sandbox = new BwrapSandbox(child, fifos, opts.fifos === undefined);
  if (child.pid !== undefined) opts.spawned?.(child.pid);
  try {
    await Promise.all([sandbox.started(opts, opts.startTimeoutMs ?? DEFAULT_START_TIMEOUT_MS), fifos.prime()]);
    return sandbox;
  } catch (err) {
    // Stopping also waits for the pool's first batch: no FIFO appears while the caller removes the dirs.
    await sandbox.stop();
    throw err;
  }
}

/** A running sandbox. `stop()` ends every process in it (its pid namespace goes with its pid 1). */
export class BwrapSandbox implements AsyncDisposable {
  /** Host pid of the sandbox's pid 1, as bwrap reported it before anything ran inside. */
  hostPid = 0;
  /** Host pid of bwrap itself, the monitor outside the sandbox (0 when it could not be spawned). */
  readonly monitorPid: number;
  /** `pid:[inode]` of the sandbox's pid namespace. */
  pidNs: string | undefined;
  /** `net:[inode]` of its network namespace (its own with `network: none`, the host's with `host`). */
  netNs: string | undefined;
  /** Resolves when bwrap exited: every process of the sandbox is gone. */
  readonly exited: Promise<void>;
  private readonly control: Writable;
  private readonly waiters = new Map<string, (e: InitEvent | { kind: 'gone' }) => void>();
  private ready: (() => void) | undefined;
  private stderrTail = '';
  private readonly stderrClosed: Promise<void>;
  private ended = false;
  /** The init loop as the spawn of a process uses it. */
  private readonly loop: InitLoop;

  constructor(
    private readonly child: ChildProcess,
    private readonly fifos: FifoPool,
    /** The pool is this sandbox's alone: closed when it stops. */
    private readonly ownsFifos: boolean,
  ) {
    this.monitorPid = child.pid ?? 0;
    const monitorGone = new Promise<void>((resolve) => {
      child.once('exit', () => resolve());
      child.once('error', () => resolve());
    });
    this.exited = monitorGone.then(async () => {
      this.ended = true;
      for (const w of [...this.waiters.values()]) w({ kind: 'gone' });
      this.waiters.clear();
      await this.pidNamespaceGone();
    });
    this.control = fdStream(child, FD.control) as Writable;
    this.control.on('error', () => undefined);
    this.loop = {
      fifos,
      gone: () => this.ended,
      send: (request) => void this.control.write(request),
      listen: (id, on) => void this.waiters.set(id, on),
      forget: (id) => void this.waiters.delete(id),
    };
    const stderr = fdStream(child, 2) as Readable;
    stderr.setEncoding('utf8');
    stderr.on('data', (s: string) => {
      this.stderrTail = (this.stderrTail + s).slice(-STDERR_KEEP);
    });
    this.stderrClosed = new Promise((resolve) => stderr.once('close', resolve));
    readInitEvents(fdStream(child, FD.events) as Readable, (e) => this.onEvent(e));
  }

  /** True once bwrap exited: nothing can start in it any more. */
  get gone(): boolean {
    return this.ended;
  }

  /**
   * Its network namespace, for a listener inside it (egress/netns-listener.ts): the path through
   * its pid 1 and the namespace that path must still name (`expectNs`); undefined once it ended.
   */
  netns(): { path: string; ns: string } | undefined {
    if (this.ended || this.netNs === undefined) return undefined;
    return { path: `/proc/${this.hostPid}/ns/net`, ns: this.netNs };
  }

  /** @internal Feeds bwrap its inputs and waits for the init loop. */
  async started(opts: StartSandboxOptions, timeoutMs: number): Promise<void> {
    const feed = (fd: number, data: Buffer | string): void => {
      const w = fdStream(this.child, fd) as Writable;
      w.on('error', () => undefined);
      w.end(data);
    };
    if (opts.seccomp !== undefined) feed(FD.seccomp, opts.seccomp);
    feed(FD.passwd, passwdFile());
    feed(FD.group, groupFile());
    feed(FD.hosts, hostsFile(opts.hostname));
    feed(FD.nsswitch, nsswitchFile());
    const info = collect(fdStream(this.child, FD.info) as Readable);
    const spawnError = new Promise<never>((_, reject) => {
      this.child.once('error', (e) => reject(new BackendUnavailableError(`could not run bwrap (${opts.bwrapPath}): ${e.message}`, { cause: e })));
    });
    const ready = new Promise<void>((resolve) => {
      this.ready = resolve;
    });
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new TimeoutError(`a bwrap sandbox did not start within ${timeoutMs} ms`)), timeoutMs);
    });
    const died = this.exited.then(async () => {
      const said = await this.lastWords();
      throw new BerthError('sandbox_start_failed', `bwrap could not start the sandbox: ${said || `exit code ${this.child.exitCode}`}`);
    });
    try {
      await Promise.race([ready, died, timeout, spawnError]);
      const pid = /"child-pid":\s*(\d+)/.exec(await Promise.race([info, died, timeout]));
      if (pid === null) throw new BerthError('sandbox_start_failed', 'bwrap did not report the pid of the sandbox');
      this.hostPid = Number(pid[1]);
      this.pidNs = readlinkSync(`/proc/${this.hostPid}/ns/pid`);
      this.netNs = readlinkSync(`/proc/${this.hostPid}/ns/net`);
    } finally {
      clearTimeout(timer);
    }
  }

  /**
   * What bwrap wrote on stderr. Its exit can be seen before the last of that is read (the pipe and
   * the exit are reported apart), so this waits for the pipe to close; bounded, as a process bwrap
   * left could hold it open.
   */
  private async lastWords(): Promise<string> {
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([this.stderrClosed, new Promise((r) => (timer = setTimeout(r, LAST_WORDS_WAIT_MS)))]);
    clearTimeout(timer);
    return this.stderrTail.trim();
  }

  private onEvent(e: InitEvent): void {
    if (e.kind === 'ready') {
      this.ready?.();
      this.ready = undefined;
      return;
    }
    this.waiters.get(e.id)?.(e);
  }

  /**
   * Starts `argv` in the sandbox with exactly `env` (values never on any argv) in `cwd` (it must
   * exist; default /workspace). Resolves once it runs; rejects if the sandbox is gone, the cwd is
   * missing or the env cannot be given.
   */
  spawn(argv: readonly string[], opts: SpawnOptions): Promise<SandboxProcess> {
    return spawnThroughInit(this.loop, argv, opts);
  }

  /** Ends every process of the sandbox and waits until bwrap is gone. Idempotent; never throws. */
  async stop(): Promise<void> {
    if (this.child.exitCode === null && this.child.signalCode === null && this.child.pid !== undefined) {
      /*
       * SIGKILL to the sandbox's pid 1 while bwrap (its parent) still runs, so that pid cannot have been
       * reused: the kernel kills the rest of the pid namespace and pid 1's exit completes only once all
       * of them are gone, and then bwrap exits. Before pid 1 is known, bwrap itself (pid 1 dies with it).
       */
      try {
        if (this.hostPid > 0 && this.pidNsOfPid1() === this.pidNs) process.kill(this.hostPid, 'SIGKILL');
        else this.child.kill('SIGKILL');
      } catch {
        this.child.kill('SIGKILL');
      }
    }
    await this.exited;
    // A batch of FIFOs being made in the run dir ends first: the caller may remove that dir next.
    if (this.ownsFifos) await this.fifos.close();
    else await this.fifos.settle();
  }

  /**
   * After bwrap exited, waits (bounded) until the sandbox's pid 1 is gone, so `exited` means every
   * process of it is. Only waits: a pid seen here is never signalled, it may belong to someone else.
   */
  private async pidNamespaceGone(): Promise<void> {
    if (this.pidNs === undefined) return;
    const deadline = Date.now() + GONE_WAIT_MS;
    while (Date.now() < deadline && this.pidNsOfPid1() === this.pidNs) await new Promise((r) => setTimeout(r, 10));
  }

  /** The pid namespace of the process now at `hostPid` (undefined when there is none, or a zombie). */
  private pidNsOfPid1(): string | undefined {
    try {
      return readlinkSync(`/proc/${this.hostPid}/ns/pid`);
    } catch {
      return undefined;
    }
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.stop();
  }
}

/** The stream of one of the child's stdio slots (node types only the first five). */
function fdStream(child: ChildProcess, fd: number): Readable | Writable {
  const s = (child.stdio as ReadonlyArray<Readable | Writable | null | undefined>)[fd];
  if (s === null || s === undefined) throw new Error(`bwrap has no pipe on fd ${fd}`);
  return s;
}

function collect(stream: Readable): Promise<string> {
  return new Promise((resolve) => {
    let s = '';
    stream.setEncoding('utf8');
    stream.on('data', (d: string) => {
      if (s.length < 4096) s += d;
    });
    stream.on('end', () => resolve(s));
    stream.on('error', () => resolve(s));
  });
}
