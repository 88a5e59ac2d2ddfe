import type { Readable, Writable } from 'node:stream';
import type { ProfileSettings } from '../config/types.js';
import { BerthError } from '../errors.js';

/** (installation, tenant, profile, key); `profile` is undefined for `shared:*` keys. */
export interface SandboxIdentity {
  installation: string;
  tenant: string;
  profile: string | undefined;
  key: string;
}

/** What the broker asks a backend to create or adopt. Pure data, no I/O. */
export interface SandboxSpec {
  identity: SandboxIdentity;
  /** Hex sha256 of the identity (see scope/naming.ts). */
  digest: string;
  /** Directory / readable name stem under `$BERTH_HOME/sandboxes/<backend>/`. */
  dirName: string;
  ephemeral: boolean;
  /** Host dir to bind at /workspace (container backends), or null. */
  mount: string | null;
  /** The scope mode / auto row that produced the key, for labels. */
  rule: string;
  settings: ProfileSettings;
}

export interface ShellTransport {
  stdin: Writable;
  stdout: Readable;
  stderr: Readable;
  /** Resolves with the shell's exit code when it ended (null when the backend cannot tell). */
  exited: Promise<number | null>;
  /** End the shell process now. Idempotent; never throws. */
  kill(): Promise<void>;
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

/** Default output bound of `execOnce`: far above what any berth helper prints (job reads are <= 1 MiB). */
export const DEFAULT_HELPER_OUTPUT_BYTES = 8 * 1024 * 1024;

/** The bound to apply for `opts`: the caller's when it is a positive number, else the default. */
export function helperOutputCap(opts: ExecOnceOptions | undefined): number {
  const n = opts?.maxOutputBytes;
  return n !== undefined && Number.isFinite(n) && n > 0 ? Math.floor(n) : DEFAULT_HELPER_OUTPUT_BYTES;
}

/** A helper printed more than its bound (a replaced `sh`, a runaway probe). */
export function helperOutputTooLarge(argv: readonly string[], where: string, capBytes: number): BerthError {
  return new BerthError(
    'helper_output_too_large',
    `helper ${JSON.stringify(argv[0] ?? '')} in ${where} printed more than ${capBytes} bytes (the helper output cap); ` +
      'it was stopped. Check that the sandbox\'s sh and core tools are not replaced by something that floods output',
  );
}

export interface ExecOnceResult {
  exitCode: number;
  stdout: Buffer;
  stderr: Buffer;
}

/** A running (or adopted) sandbox. */
export interface Sandbox {
  readonly spec: SandboxSpec;
  /** Backend reference (container id, host dir) recorded in the state store. */
  readonly ref: string;
  /** Container name or directory name, for people. */
  readonly name: string;
  /** Starting directory inside the sandbox when nothing else applies. */
  readonly defaultCwd: string;
  /** In-sandbox directory for berth's own files (shell snapshots); never mounted from the host workspace. */
  readonly stateDir: string;
  /** Host directory that holds this sandbox's files (local dir, docker bind root), if any. */
  readonly hostDir: string | undefined;
  /** True when `ensure` had to recreate a sandbox that was removed out of band. */
  readonly recreated: boolean;
  /**
   * Start a persistent `bash` reading commands from stdin. `env` is the full granted environment;
   * values travel through the process/API env, never argv.
   */
  openShell(opts: { env: Readonly<Record<string, string>>; cwd: string }): Promise<ShellTransport>;
  /**
   * Processes in the sandbox and how many it may hold, as the engine counts them (nothing is
   * started inside); undefined where unknown. Tells a sandbox whose pids a fork bomb took from one
   * where a shell failed to start for another reason.
   */
  processCount?(): Promise<{ current: number; limit: number } | undefined>;
  /** In-sandbox dirs a restart empties (tmpfs mounts), for the notice when berth restarts it. */
  readonly volatileDirs?: readonly string[];
  /** Run one short helper inside the sandbox (kill helper, probes). Not for user commands. */
  execOnce(argv: string[], opts?: ExecOnceOptions): Promise<ExecOnceResult>;
  /** In-sandbox home directory (credential dirs under it are never transferred). */
  readonly homeDir: string;
  /** In-sandbox roots that file transfer may touch (workspace, home, scratch); see files/sandbox-path.ts. */
  readonly fileRoots: readonly string[];
  /**
   * Extract a tar archive into `destDir`, an existing directory inside the sandbox (absolute,
   * already resolved and checked by the caller). Resolves only when every entry landed; any
   * failure rejects, so a failed delivery is never reported as a success.
   */
  putArchive(destDir: string, tar: Buffer | Readable): Promise<void>;
  /**
   * A tar stream of `path` (absolute, resolved and checked by the caller): one entry named
   * `./<basename>`, with the folder's contents below it. The stream errors if the archive could
   * not be produced completely; destroying it stops the producer.
   */
  getArchive(path: string): Promise<Readable>;
  /**
   * The host file behind an in-sandbox path when it lives on a host directory bound into the
   * sandbox (a persistent sandbox's dirs, an attached workspace, a volume; every path on
   * `local`), with the host root it must stay under; undefined when it does not (tmpfs, remote).
   */
  hostPathOf(sandboxPath: string): { hostPath: string; hostRoot: string } | undefined;
}

/**
 * Runs `fn` holding a named lease that no other process of the same installation holds at the
 * same time (engine objects that several processes may create, such as tenant networks).
 */
export type Lease = <T>(name: string, fn: () => Promise<T>) => Promise<T>;

/** What a backend found labelled as berth's, for reapers. */
export interface ManagedSandbox {
  ref: string;
  name: string;
  digest: string;
  ephemeral: boolean;
  running: boolean;
}

/**
 * The narrow seam between the broker and an engine. What a backend cannot do throws
 * `UnsupportedError`; nothing ever falls back to the host.
 */
export interface Backend {
  /** Its module's name (what it is and does: the module's traits). */
  readonly name: string;
  /** Check the engine is reachable and usable for these settings (start-up). */
  check(settings: ProfileSettings): Promise<void>;
  /** Create, adopt or reattach the sandbox for `spec`. `knownRef` is the store's record, if any. */
  ensure(spec: SandboxSpec, knownRef: string | undefined): Promise<Sandbox>;
  /** Remove the sandbox and its host dir. "Already gone" is success. */
  remove(ref: string, hostDir: string | undefined): Promise<void>;
  /** Stop (not remove) a persistent sandbox that went idle. No-op where meaningless. */
  stop(ref: string): Promise<void>;
  /** This installation's sandboxes as the engine sees them. */
  listManaged(): Promise<ManagedSandbox[]>;
  /** Removes engine objects of this installation that no sandbox uses any more (networks); their names. */
  reapIdleNetworks?(): Promise<string[]>;
  /**
   * Measures the sandbox's disk use against its bound: over it, the error its calls get
   * (`disk_limit_exceeded`; the caller stops it, and `ensure` does not start it again while it is
   * over). Absent where there is no disk bound.
   */
  checkDiskLimit?(sandbox: Sandbox): Promise<BerthError | undefined>;
  /** Release engine connections. Idempotent. */
  close(): Promise<void>;
}


