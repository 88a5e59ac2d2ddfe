import type { ExecOnceOptions, ExecOnceResult, ProcessGroups, ShellTransport } from './transport.js';
import type { Logger } from '../logging/logger.js';
import type { ProcessKiller } from './warden.js';

/** The result of one command, as every surface (library, CLI --json, HTTP, MCP) reports it. */
export interface ExecResult {
  exitCode: number;
  stdout: string;
  stderr: string;
  /** stdout and stderr interleaved in arrival order. */
  output: string;
  /** The shell's cwd after the command (in-sandbox path). */
  cwd: string;
  durationMs: number;
  timedOut: boolean;
  truncated: boolean;
  /** Host path of the full, uncapped output when it was spilled. */
  fullOutputPath?: string;
  /**
   * Set when the shell had to be replaced (after every timeout or cancel, `exit` in the command, a
   * shell that was killed); a line on stderr then says what the new shell restored and what was lost.
   */
  shellReplaced?: boolean;
  /** Set when the sandbox had been removed out of band and was recreated for this call. */
  sandboxRecreated?: boolean;
  /** Set on the first result after the sandbox was resumed from hibernation: what came back and what did not. */
  sandboxResumed?: ResumeReport;
}

/** What a resumed sandbox kept of the one that was hibernated (docs/design.md §6). */
export interface ResumeReport {
  /** When it was hibernated (ms since the epoch). */
  hibernatedMs: number;
  /** What came back: its files always; the shell's cwd, exported variables, functions and aliases when its saved state loaded. */
  restored: string[];
  /** What did not: processes, unexported variables, shell options and traps, and what tmpfs dirs held. */
  lost: string[];
}

export interface ShellOptions {
  /**
   * Opens a fresh shell process (called at start and whenever the shell must be replaced). `env`
   * holds what the shell adds to the granted environment (its tag, `BERTH_SHELL_TAG`): it must
   * reach the process's own environment.
   */
  open: (env: Readonly<Record<string, string>>) => Promise<ShellTransport>;
  /** Runs a helper inside the same sandbox (the kill routine when no `killer` is given or it failed). */
  execOnce: (argv: string[], opts?: ExecOnceOptions) => Promise<ExecOnceResult>;
  /**
   * Ends process trees in the sandbox without starting a process there: the sandbox's `Warden`,
   * shared by its shells. Default: the same routine run as a helper through `execOnce`.
   */
  killer?: ProcessKiller | undefined;
  /**
   * The sandbox's kernel grouping, where it has one: each command runs in a group of its own that
   * a timeout or cancel ends whole; the killer's tag-based routine is then the fallback.
   */
  groups?: ProcessGroups | undefined;
  /** In-sandbox dir for snapshots; created by the shell if missing. */
  stateDir: string;
  /** Safe file stem unique per shell identity (snapshot file name). */
  shellId: string;
  /** Directory to start in when nothing was recorded. */
  defaultCwd: string;
  /** Recorded/resolved starting cwd for a fresh shell; missing (or a missing dir): the saved state's cwd, then defaultCwd. */
  initialCwd?: string | undefined;
  /** Granted secret names: never written to the snapshot, re-exported before each command. */
  secretNames: readonly string[];
  /**
   * Host dir for spilled full output (created 0700; files 0600). Undefined: output over the limit
   * is not kept anywhere (the caller streamed all of it, as the CLI does) and no result carries
   * `fullOutputPath`.
   */
  spillDir: string | undefined;
  maxOutputChars: number;
  /** Values to replace with `[REDACTED]` in returned output (>= 8 chars). */
  redactValues?: readonly string[];
  /** Debug lines (`berth:shell`, with the sandbox's key and ref); never given a command's output or env. */
  log?: Logger | undefined;
}

export interface RunOptions {
  timeoutMs: number;
  /** One-off working dir for this command; an error result if it does not exist. Not recorded. */
  workdir?: string | undefined;
  stdin?: string | Buffer | undefined;
  /** Live chunks for streaming surfaces (CLI, SSE). Already redacted. */
  onChunk?: ((stream: 'stdout' | 'stderr', chunk: string) => void) | undefined;
  /**
   * Cancels the command (the caller went away): handled like a timeout (the command's tree is
   * killed, nothing more of the line runs), but the result has exit code 130 and `timedOut`
   * false. Aborted before the command started: nothing runs, exit code 130.
   */
  signal?: AbortSignal | undefined;
  /**
   * Runs the command in a new process group of this name (where the sandbox has the kernel's
   * grouping), which keeps what the command leaves running after it: a background job's start
   * line, so `ProcessGroups.killGroup(group)` ends the job later. Letters, digits, `-` and `_`.
   */
  group?: string | undefined;
}
