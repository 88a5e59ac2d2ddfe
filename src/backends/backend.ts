import type { Readable } from 'node:stream';
import type { ProxyAddress } from '../egress/proxy-address.js';
import type { BerthError } from '../errors.js';
import type { SandboxIdentity } from '../scope/naming.js';
import type { ExecOnceOptions, ExecOnceResult, ProcessGroups, ShellTransport, SpawnedProcess } from '../shell/transport.js';
import type { GuardStatus } from '../egress/host-guard.js';

/**
 * What the broker asks a backend to create or adopt. Pure data, no I/O. `S` is the backend
 * module's settings section (`DockerSettings`): each backend reads only its own.
 */
export interface SandboxSpec<S = unknown> {
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
  /** The call's place's merged section of the backend's module (`docker:` with its defaults and the profile's keys). */
  section: S;
  /** What the sandbox's network may reach; absent: open, no proxy (docs/egress.md). */
  egress?: SandboxEgress | undefined;
}

/** Where a sandbox finds the CA files of berth's egress proxy (read-only). */
export const EGRESS_CA_DIR = '/etc/berth-egress';
/** The system bundle with berth's CA appended, for SSL_CERT_FILE and the like. */
export const EGRESS_CA_BUNDLE = `${EGRESS_CA_DIR}/ca-bundle.pem`;
/** berth's CA alone, for NODE_EXTRA_CA_CERTS. */
export const EGRESS_CA_CERT = `${EGRESS_CA_DIR}/berth-ca.pem`;

/**
 * A sandbox's network as the broker asks for it. `open`: the backend's own network (never the
 * host's services: the host guard). `allowlist` and `none`: loopback only, no route anywhere; in
 * `allowlist` berth's proxy listens on the sandbox's loopback (`Sandbox.netns`).
 */
export interface SandboxEgress {
  mode: 'open' | 'allowlist' | 'none';
  /** The CA files (PEM) to place read-only at EGRESS_CA_DIR; absent when no proxy serves the sandbox. */
  ca?: { bundlePem: string; caPem: string } | undefined;
  /**
   * Where the sandbox reaches the proxy's shared listener (`egressProxy.advertise`), for a backend
   * whose sandboxes reach it shared (`egressProxyReach`): the one address their network admits in
   * `allowlist`. Absent otherwise.
   */
  sharedProxy?: ProxyAddress | undefined;
}

/** A sandbox's network namespace: where to open it, and which one it must be. */
export interface NetnsRef {
  path: string;
  ns: string;
}

/**
 * The network a sandbox gets: its backend section's (`docker.network`, `bwrap.network`) in egress
 * mode `open`; `none` (loopback only) in `allowlist` and `none`, whatever the section says.
 */
export function networkOf<N extends string>(spec: { egress?: SandboxEgress | undefined; section: { network: N } }): N | 'none' {
  return (spec.egress?.mode ?? 'open') === 'open' ? spec.section.network : 'none';
}

/**
 * How a process starts in a sandbox. `env` values travel the way the backend delivers them
 * (the process's own environment, an exec's Env, a preamble on stdin), never on any argv.
 */
export interface SpawnOptions {
  /** Added to the sandbox's own base environment for this process. */
  env: Readonly<Record<string, string>>;
  /** Working dir inside the sandbox; default: the sandbox's default dir. */
  cwd?: string | undefined;
  /** Pipe stdin (a shell, `tar -x`); otherwise the process reads end-of-file at once. */
  stdin: boolean;
  /**
   * A process meant to live long (a persistent shell). Where a backend must ask whether a process
   * ended (docker's FIFO stdio), it does not ask for this one: its end shows in the shell's own
   * protocol, timeouts and warden.
   */
  lasting?: boolean | undefined;
}

/**
 * What a backend gives for one running (or adopted) sandbox: what it is, and ONE way to start a
 * process in it. Everything else a sandbox does (a persistent shell, one-off helpers with their
 * caps and timeouts, tar in and out) is built on `spawn` once, in `plumbing/`.
 */
export interface SandboxHandle {
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
  /** In-sandbox home directory (credential dirs under it are never transferred). */
  readonly homeDir: string;
  /** In-sandbox roots that file transfer may touch (workspace, home, scratch); see files/sandbox-path.ts. */
  readonly fileRoots: readonly string[];
  /** In-sandbox dirs a restart empties (tmpfs mounts), for the notice when berth restarts it. */
  readonly volatileDirs?: readonly string[];
  /**
   * Start `argv` in the sandbox. A sandbox that no longer exists rejects with
   * `SandboxNotFoundError` (the broker recreates it once); an engine or process that cannot start
   * it rejects through the backend's one error translator.
   */
  spawn(argv: readonly string[], opts: SpawnOptions): Promise<SpawnedProcess>;
  /**
   * Processes in the sandbox and how many it may hold, as the engine counts them (nothing is
   * started inside); undefined where unknown. Tells a sandbox whose pids a fork bomb took from one
   * where a shell failed to start for another reason.
   */
  processCount?(): Promise<{ current: number; limit: number } | undefined>;
  /**
   * Where the sandbox's main process is berth's warden (warden-script.ts `WARDEN_RESIDENT`, a
   * docker container made by this berth): attaches to its stdin and output. Nothing is started
   * and ending the transport only lets go of it. Absent where the warden is a bash opened later.
   */
  readonly attachWarden?: (() => Promise<ShellTransport>) | undefined;
  /**
   * The kernel's grouping of the sandbox's processes, where berth manages them from the host (see
   * `ProcessGroups`); absent where it cannot, and then a command's processes are found by tags.
   */
  readonly processGroups?: ProcessGroups | undefined;
  /**
   * The host file behind an in-sandbox path when it lives on a host directory bound into the
   * sandbox (a persistent sandbox's dirs, an attached workspace, a volume; every path on
   * `local`), with the host root it must stay under; undefined when it does not (tmpfs, remote).
   */
  hostPathOf(sandboxPath: string): { hostPath: string; hostRoot: string } | undefined;
  /**
   * The sandbox's network namespace on this host, where berth's egress proxy listens for it: a
   * path to it (`/proc/<pid>/ns/net`) and the namespace that path must still name when opened
   * (`net:[inode]`: a pid reused meanwhile names another); absent on a backend berth cannot enter.
   */
  netns?(): Promise<NetnsRef>;
}

/** A running sandbox as the shell, warden, files and jobs use it: a handle plus the plumbing. */
export interface Sandbox extends SandboxHandle {
  /**
   * Start a persistent `bash` reading commands from stdin. `env` is the full granted environment;
   * values travel through the process/API env, never argv.
   */
  openShell(opts: { env: Readonly<Record<string, string>>; cwd: string }): Promise<ShellTransport>;
  /** Run one short helper inside the sandbox (kill helper, probes). Not for user commands. */
  execOnce(argv: string[], opts?: ExecOnceOptions): Promise<ExecOnceResult>;
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
}

/**
 * Runs `fn` holding a named lease that no other process of the same installation holds at the
 * same time (engine objects that several processes may create, such as tenant networks).
 */
export type Lease = <T>(name: string, fn: () => Promise<T>) => Promise<T>;

/** What a running sandbox uses at one moment, as its engine counts it (nothing is started inside). */
export interface SandboxUsage {
  /** When it was read (ms since the epoch): CPU use is the change of `cpuNanos` between two samples. */
  sampledMs: number;
  /** CPU time its processes used since it started, in nanoseconds. */
  cpuNanos: number;
  memoryBytes: number;
  memoryLimitBytes: number | undefined;
  processes: number | undefined;
  processLimit: number | undefined;
  /** Bytes it writes on the host's disk, where the backend measures that (docker: the writable layer); absent elsewhere. */
  diskBytes?: number;
}

/** What a backend found labelled as berth's, for reapers. */
export interface ManagedSandbox {
  ref: string;
  name: string;
  digest: string;
  ephemeral: boolean;
  running: boolean;
  /**
   * Set on a warm-pool sandbox (see `WarmCapability`): its pool shape and the broker that made it.
   * Its `digest` is '' (a pool sandbox carries no identity); once claimed, the store's record
   * names it by `ref`.
   */
  pool?: { shape: string; owner: string };
}

/** One pool of interchangeable, unassigned sandboxes: what fixes them at creation, and whose they are. */
export interface PoolShape<S = unknown> {
  /** The pool's key (`WarmCapability.shapeOf`, with the tenant folded in when `tenant` is set). */
  digest: string;
  /** The backend module's section of the settings the pool serves. */
  section: S;
  /** The tenant whose network its sandboxes join, or undefined when they join none (any tenant may claim one). */
  tenant: string | undefined;
  /** The broker that fills it (`pid:starttime:nonce`): a reaper removes the unclaimed sandboxes of a dead one. */
  owner: string;
}

/**
 * A backend that can keep sandboxes created and started before anyone asks (a warm pool), and
 * give one to an identity later. The broker's `WarmPool` drives it; the sandbox of a claim is used
 * by one identity and removed with it, never pooled again.
 */
export interface WarmCapability<S = unknown> {
  /**
   * What fixes a sandbox of these settings at creation, as a digest; `perTenant` when its
   * network is its tenant's (the pool is then kept per tenant). A reason string when these
   * settings cannot be pooled (the broker reports it at start-up).
   */
  shapeOf(section: S): { digest: string; perTenant: boolean } | { unpoolable: string };
  /** Creates and starts one unassigned sandbox of `shape`, labelled as a pool sandbox, with no identity. */
  prepare(shape: PoolShape<S>): Promise<Sandbox>;
  /**
   * Gives a prepared sandbox to `spec`'s identity (ephemeral, no host mount), under the broker's
   * identity lock: its name becomes the identity's; nothing is read from inside it. Rejects when
   * it is gone; the caller then creates one the usual way.
   */
  claim(prepared: Sandbox, spec: SandboxSpec<S>): Promise<Sandbox>;
}

/** A saved copy of a sandbox, as its backend keeps it. */
export interface SnapshotRef {
  /** The backend's reference (an image id and a host dir, a dir, an archive path), recorded in the store. */
  ref: string;
  /** What it takes on the host, as the tenant's snapshot bytes count it. */
  bytes: number;
}

/** What one snapshot may take of the host (the rest of its tenant's `limits.snapshotBytes`). */
export interface SnapshotBudget {
  /** Bytes, by apparent size: a sparse file counts in full, as a commit or an archive writes it out. */
  maxBytes: number;
  /** Where the bound comes from, for the refusal: `tenant "t" may keep 1024 more bytes (limits.snapshotBytes = 4096)`. */
  limit: string;
  /**
   * Claims `bytes` (this snapshot's whole size so far) in the store before they are copied, so
   * snapshots of the tenant made at the same time each see what the others took; false when they
   * no longer fit (the snapshot is refused). The broker's; absent, `maxBytes` alone bounds it.
   */
  claim?(bytes: number): boolean;
}

/** A value that must never be part of a snapshot (a granted secret's), named for the error. */
export interface ForbiddenValue {
  name: string;
  value: string;
  /** A credential's real value (the sandbox holds only its placeholder), not a granted secret. */
  credential?: boolean;
}

/**
 * A backend that can save a sandbox's files and make a sandbox from them again (snapshots,
 * restore, fork). A snapshot holds the sandbox's filesystem, with the berth-managed host dirs bound
 * into it, and so its shells' saved state in `stateDir` (the broker closes its shells first).
 */
export interface SnapshotCapability<S = unknown> {
  /**
   * Saves `sandbox` as snapshot `id` of this installation. No process of the sandbox runs while
   * its files are copied (one could swap a dir for a symlink to host files mid-copy): docker pauses
   * it and it runs on after; a backend that cannot freeze it ends its processes (bwrap), and the
   * caller brings it up again with `ensure`, as after a hibernation. A snapshot
   * that would hold one of `forbidden` is refused (`policy_refused`, naming the variable and the
   * path, never the value) and removed. One past `budget` is refused (`tenant_limit`, naming the
   * part, its size and the limit) before that part is copied: each part is measured by apparent
   * size with the sandbox frozen, and what cannot be measured first is copied through a cap. On
   * any failure nothing is left behind.
   */
  create(sandbox: Sandbox, id: string, forbidden: readonly ForbiddenValue[], budget: SnapshotBudget): Promise<SnapshotRef>;
  /**
   * Rejects, naming what is missing or damaged, unless snapshot `ref` is there and whole. A
   * restore or fork asks first, before it touches anything.
   */
  verify(ref: string): Promise<void>;
  /**
   * Creates the sandbox of `spec` from snapshot `ref`, as `ensure` creates a new one (same
   * mounts, limits, network and labels). With `replacing` (a restore), the sandbox it names is
   * removed only once the new one runs, and the new one then takes its name and host dir; on any
   * failure the old one is untouched and whatever was made is removed.
   */
  createFrom(spec: SandboxSpec<S>, ref: string, replacing: { ref: string; hostDir: string | undefined } | undefined): Promise<Sandbox>;
  /**
   * Removes snapshot `ref`. "Already gone" is success. `kept`: it is no snapshot any more, but the
   * backend could not free what it takes yet (a docker image a fork's container still uses); a
   * later `remove` of the same ref frees it once it can, and its bytes count until then.
   */
  remove(ref: string): Promise<void | 'kept'>;
  /** The refs of this installation's snapshots the backend holds (the reaper removes those no record names). */
  list(): Promise<string[]>;
}

/**
 * The narrow seam between the broker and an engine: lifecycle, plus `spawn` on each sandbox's
 * handle. What a backend cannot do throws `UnsupportedError`; nothing ever falls back to the host.
 * `ensure` returns `new ProcessSandbox(handle)` (plumbing/process-sandbox.ts), or a subclass that
 * overrides one piece of the plumbing.
 */
export interface Backend<S = unknown> extends AsyncDisposable {
  /** Its module's name (what it is and does: the module's traits). */
  readonly name: string;
  /**
   * Check the engine is reachable and usable for a place with this section (start-up), and for
   * sandboxes with this `egress` (what berth's proxy needs of the engine, when it serves them).
   */
  check(section: S, egress?: SandboxEgress): Promise<void>;
  /** Create, adopt or reattach the sandbox for `spec`. `knownRef` is the store's record, if any. */
  ensure(spec: SandboxSpec<S>, knownRef: string | undefined): Promise<Sandbox>;
  /** Remove the sandbox and its host dir. "Already gone" is success. */
  remove(ref: string, hostDir: string | undefined): Promise<void>;
  /** Stop (not remove) a persistent sandbox that went idle. No-op where meaningless. */
  stop(ref: string): Promise<void>;
  /**
   * Whether a process a command started (a job a call left running, a shell) still runs in the
   * sandbox `ref`, read from the host's view of its processes (nothing started inside); undefined
   * when this backend or host cannot tell. A sandbox no berth process holds is not hibernated while
   * one does.
   */
  commandsRunning?(ref: string): Promise<boolean | undefined>;
  /** This installation's sandboxes as the engine sees them. */
  listManaged(): Promise<ManagedSandbox[]>;
  /** Removes engine objects of this installation that no sandbox uses any more (networks); their names. */
  reapIdleNetworks?(opts?: { timeoutMs?: number }): Promise<string[]>;
  /**
   * Takes down host mounts of this installation that no sandbox uses any more (a persistent
   * sandbox's disk image left mounted by a process that died before its container existed); the
   * host dirs released.
   */
  releaseIdleDisks?(): Promise<string[]>;
  /**
   * Removes berth's process groups (`ProcessGroups`) that no process is in any more: those of
   * jobs and `cmd &` leftovers that ended since, and a crashed berth's. Absent without groups.
   */
  reapIdleGroups?(): Promise<void>;
  /**
   * Measures the sandbox's disk use against its bound: over it, the error its calls get
   * (`disk_limit_exceeded`; the caller stops it, and `ensure` does not start it again while it is
   * over). Absent where there is no disk bound.
   */
  checkDiskLimit?(sandbox: Sandbox): Promise<BerthError | undefined>;
  /**
   * What each running sandbox of `refs` uses now (`berth top`, the dashboard); a ref missing from
   * the answer could not be measured. Absent where the engine cannot tell.
   */
  usage?(refs: readonly string[]): Promise<Map<string, SandboxUsage>>;
  /**
   * Whether the host guard (egress/host-guard.ts) keeps this backend's sandboxes from the host's
   * services now; with `repair`, rules someone removed are put back first (and logged). Undefined
   * where no guard applies (yet): no sandbox of this process is on a network the guard covers.
   * The periodic sweep repairs; `explain` only reads.
   */
  hostGuard?(repair: boolean): Promise<GuardStatus | undefined>;
  /** Warm pools of started, unassigned sandboxes; absent where the backend has none. */
  readonly warm?: WarmCapability<S>;
  /** Snapshots, restore and fork; absent where the backend cannot (the broker refuses them there). */
  readonly snapshots?: SnapshotCapability<S>;
  /** Release engine connections. Idempotent; `[Symbol.asyncDispose]` does the same. */
  close(): Promise<void>;
}


