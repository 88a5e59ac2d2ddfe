import type { ExecOnceOptions, ExecOnceResult, ShellTransport } from '../backends/backend.js';

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
  /** Set when the shell had to be replaced (timeout of a stuck shell, `exit` in the command). */
  shellReplaced?: boolean;
  /** Set when the sandbox had been removed out of band and was recreated for this call. */
  sandboxRecreated?: boolean;
}

export interface ShellOptions {
  /** Opens a fresh shell process (called at start and whenever the shell must be replaced). */
  open: () => Promise<ShellTransport>;
  /** Runs a helper inside the same sandbox (used to kill a command's process tree). */
  execOnce: (argv: string[], opts?: ExecOnceOptions) => Promise<ExecOnceResult>;
  /** In-sandbox dir for snapshots; created by the shell if missing. */
  stateDir: string;
  /** Safe file stem unique per shell identity (snapshot file name). */
  shellId: string;
  /** Directory to start in when nothing was recorded. */
  defaultCwd: string;
  /** Recorded/resolved starting cwd for a fresh shell; missing dirs fall back to defaultCwd silently. */
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
}

export interface RunOptions {
  timeoutMs: number;
  /** One-off working dir for this command; an error result if it does not exist. Not recorded. */
  workdir?: string | undefined;
  stdin?: string | Buffer | undefined;
  /** Live chunks for streaming surfaces (CLI, SSE). Already redacted. */
  onChunk?: ((stream: 'stdout' | 'stderr', chunk: string) => void) | undefined;
}
