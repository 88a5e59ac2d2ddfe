import type { Readable, Writable } from 'node:stream';

/*
 * What the shell layer needs of a process in a sandbox: its streams, its end, its pids, and the
 * kernel's grouping where the sandbox has one. Backends provide these (backends/backend.ts builds
 * its seam on them); the shell, the warden and the plumbing only use them.
 */

/** One process started in a sandbox. */
export interface SpawnedProcess {
  /** Its stdin when piped (ending it is EOF), else null. */
  readonly stdin: Writable | null;
  readonly stdout: Readable;
  readonly stderr: Readable;
  /** Resolves with its exit code once it ended (128 + n for signal n), or null when the backend cannot tell. */
  readonly exited: Promise<number | null>;
  /**
   * End it and what it started in the sandbox, by the backend's means (a process group, a tag in
   * the environment, a channel). Idempotent; never throws.
   */
  kill(): Promise<void>;
  /**
   * Its pid on berth's host and as the sandbox sees it, as the backend knows them (never as
   * anything inside the sandbox says them), where the backend can tell: a shell's own report of its
   * pid comes from code a snapshot can change. Undefined when it cannot tell (the process ended).
   */
  readonly pids?: (() => Promise<ProcessPids | undefined>) | undefined;
  /**
   * Its stdout and stderr are pipes or FIFOs on berth's own host (local, bwrap, docker's FIFO
   * stdio): every byte it wrote before it ended reaches berth before their end, none is lost on a
   * link. Unset: a stream over a connection (an attach stream, an SSH channel, a WebSocket).
   */
  readonly hostPipes?: boolean | undefined;
}

/** One process's pids: on berth's host (where the backend can tell), and inside its sandbox. */
export interface ProcessPids {
  host: number | undefined;
  sandbox: number;
}

/** A process with stdin piped: a persistent shell's or the warden's stream. */
export interface ShellTransport extends SpawnedProcess {
  readonly stdin: Writable;
}

export interface ExecOnceOptions {
  timeoutMs?: number;
  /**
   * Bound on the helper's collected stdout + stderr together (default
   * `DEFAULT_HELPER_OUTPUT_BYTES`). Helpers run the sandbox's own `sh`, which the agent can
   * replace, so their output is untrusted: past the bound collection stops, the helper is ended
   * and `execOnce` rejects with `helper_output_too_large`.
   */
  maxOutputBytes?: number;
}

export interface ExecOnceResult {
  exitCode: number;
  stdout: Buffer;
  stderr: Buffer;
}

/**
 * The kernel's grouping of one sandbox's processes: each command of a shell runs in a group of its
 * own (a cgroup nested in the sandbox's), which what it starts cannot leave whatever it does to its
 * environment, session or process group, and which nothing inside the sandbox can write to; so a
 * timeout, a cancel or a job's kill ends all of it, fork bombs included. Present where berth
 * manages the sandbox's cgroups from its host (docker on a local engine, bwrap, local as root), and
 * on ssh, where a root helper on the remote host does it for berth.
 */
export interface ProcessGroups {
  /** How a group is ended, for explain and logs (`cgroup2 (cgroup.kill)`). */
  readonly mechanism: string;
  /**
   * Takes the shell whose pids are `pids` (its transport's, as the backend knows them: on the host
   * where berth manages the groups there, in the sandbox where a remote helper does) into a group
   * of its own, before it runs anything (its init sources a snapshot the sandbox can write);
   * undefined when that is no process of this sandbox.
   */
  adopt(pids: ProcessPids): Promise<ShellGroups | undefined>;
  /**
   * Ends every process of the group a command named (`ShellGroups.prepare`: a background job's)
   * and removes the group; how many processes it held, or undefined when there is no such group.
   */
  killGroup(name: string): Promise<number | undefined>;
  /**
   * Whether a process a command started is still in one of the sandbox's groups (a job left
   * running, a daemon, or a live shell); with `shells` (the host pids of this process's live shells,
   * each in the group of its last command), shells are left out; absent where the groups cannot be
   * read from here.
   */
  commandsRunning?(shells?: ReadonlySet<number>): boolean;
}

/** The groups of one shell (see `ProcessGroups.adopt`); the shell layer calls them in this order. */
export interface ShellGroups {
  /**
   * Before a command: the shell moves to a fresh group when the last command left a process in its
   * own (an earlier `cmd &` stays where it is), or, with `name`, into a new group of that name,
   * which the command's processes keep after it (a background job's). Throws when it could not
   * move: the group it is in may then hold earlier jobs, and `timeout` refuses. Groups managed on
   * another host (ssh) answer asynchronously; the shell layer awaits each step.
   */
  prepare(name?: string): void | Promise<void>;
  /** After a command ended normally: a named group is left at once, to the processes it holds. */
  settle(): void | Promise<void>;
  /**
   * Ends the running command whatever its processes did: freezes its group, stops the shell and
   * takes it out, kills everything left in the group, then sends the shell SIGUSR1 and lets it go
   * on, or kills it when it no longer catches SIGUSR1. `stillFull`: the sandbox was out of pids
   * and still is without the group's. Throws when the shell has no group of its own.
   */
  timeout(): Promise<{ killed: number; shell: 'cont' | 'killed' | 'gone'; stillFull: boolean }>;
  /** After the shell died during a command: ends what is left in the command's group. */
  endCommand(): Promise<number>;
  /** Ends every group this shell made: its commands' leftovers, its background jobs. */
  endAll(): Promise<number>;
  /** The shell has ended: its empty groups go (those still holding processes stay theirs). */
  release(): void | Promise<void>;
}
