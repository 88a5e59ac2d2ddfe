import type { Backend, SandboxUsage } from '../backends/backend.js';
import type { BerthConfig } from '../setup/berth-config.js';
import type { TenantQuota, TenantUsage } from './state/sandbox-table.js';
import type { ExecResult } from '../shell/types.js';
import type { SandboxState } from './sandbox-measures.js';
import type { KeeperStart } from './egress-keeper.js';
import type { StartGate } from './start-gate.js';
import type { AuditEntry } from './state/audit-table.js';
import type { JobRecord } from './state/job-table.js';

/** How `Broker.open` builds a broker. */
export interface BrokerOptions {
  /** A validated config; when absent it is loaded from `configPath`, `./berth.yaml` or `$BERTH_HOME/config.yaml`. */
  config?: BerthConfig;
  configPath?: string;
  /** Directory searched for `berth.yaml` (default: process.cwd()). */
  cwd?: string;
  /** State dir (default `$BERTH_HOME` or `~/.berth`). */
  berthHome?: string;
  /** The environment read once at start-up (forwarded grants, BERTH_SESSION). Default: process.env. */
  env?: NodeJS.ProcessEnv;
  /** Injected backends (tests), by module name: the config's catalog may hold a test's module too. */
  backends?: Readonly<Record<string, Backend>>;
  /**
   * Whether this process holds the sessions it opens (default true: a library or server owns its
   * sessions; if it dies they are reaped). The CLI passes false: its sessions stay open across
   * invocations until `berth close` or idle expiry.
   */
  holdSessions?: boolean;
  /** Run the orphan reaper at first engine use and periodically (default true). */
  reap?: boolean;
  /**
   * Keep the warm pools the config asks for (`warmPool.size`): sandboxes created and started
   * ahead for new ephemeral sessions (default false). Only for a broker that lives long
   * (`berth serve` passes true); a one-shot CLI command never creates pool sandboxes. A pool on a
   * backend that cannot keep one is an error here.
   */
  warmPool?: boolean;
  /**
   * Keep the full output of a command over `exec.maxOutputChars` in a private spill file and
   * report it as `fullOutputPath` (default true). The CLI passes false: it streams the whole
   * output live, and a file would outlive the call that could use it.
   */
  spillOutput?: boolean;
  /**
   * Bounds the sandbox creations and shell starts this broker runs at once (default:
   * `StartGate.forThisMachine()`, twice the cores and at least 4); more wait their turn.
   */
  startGate?: StartGate;
  /**
   * Where debug lines go, one namespaced line at a time (`berth:docker`, `berth:shell`,
   * `berth:broker`, ...); never given a secret value. Default: the lines `BERTH_DEBUG` (from `env`)
   * asks for, on stderr.
   */
  log?: (namespace: string, message: string) => void;
  /**
   * Starts a process that keeps the egress proxies of sandboxes a background job still runs in
   * when this broker closes (the CLI's `berth __keep`); absent, the close says on the log that such
   * a job is left without network.
   */
  keeper?: KeeperStart;
}

export interface ExecOptions {
  timeoutSeconds?: number;
  workdir?: string;
  stdin?: string | Buffer;
  onChunk?: (stream: 'stdout' | 'stderr', chunk: string) => void;
  /**
   * Cancels the command when the caller goes away (an HTTP client that disconnected): its
   * process tree is killed as on a timeout and the result (and the audit) has exit code 130.
   */
  signal?: AbortSignal;
}

export interface BrokerExecResult extends ExecResult {
  sandboxKey: string;
}

/** A sandbox as `list` reports it. */
/** The operator's view of this installation (`Broker.overview`). */
export interface Overview {
  sandboxes: Array<SandboxInfo & { state: SandboxState; usage: SandboxUsage | undefined }>;
  /** Each tenant that holds sandboxes: what they add up to against the tenant's limits. */
  tenants: Array<{ tenant: string; usage: TenantUsage; quota: TenantQuota }>;
  /** The latest audit entries of every tenant, newest first. */
  recentCalls: AuditEntry[];
}

/** What the store alone tells of this installation (`Broker.storeOverview`): no engine is asked. */
export interface StoreOverview extends Omit<Overview, 'sandboxes'> {
  sandboxes: SandboxInfo[];
  /** The latest background jobs of every tenant, newest first, with their status as last recorded. */
  recentJobs: JobRecord[];
}

export interface SandboxInfo {
  sandboxKey: string;
  tenant: string;
  profile: string | null;
  backend: string;
  rule: string;
  persistent: boolean;
  name: string;
  mount: string | null;
  createdMs: number;
  lastUsedMs: number;
  /** When berth hibernated it, as its record says (the next call resumes it); absent while it runs. */
  hibernatedMs?: number;
  sessions: { session: string; open: boolean }[];
}

/** Every sandbox and session of an installation, as the operator's metrics count them. */
export interface Inventory {
  sandboxes: { tenant: string; backend: string; persistent: boolean; state: SandboxState }[];
  sessions: { tenant: string; open: boolean }[];
}
