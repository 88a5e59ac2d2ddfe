import type Database from 'better-sqlite3';
import { defaultBerthHome, loadConfig } from '../setup/load-config.js';
import { assertParsedConfig } from '../setup/parse-config.js';
import type { BerthConfig } from '../setup/berth-config.js';
import type { CallScopeInput } from '../scope/call-scope.js';
import type { GuardStatus } from '../egress/host-guard.js';
import type { AuditFilter } from './audit.js';
import type { EgressAuditEntry, EgressAuditFilter } from './state/egress-table.js';
import type { StateStore } from './state/state-store.js';
import { closeParts } from './broker-lifecycle.js';
import { buildParts, type BrokerParts } from './broker-parts.js';
import type { BrokerExecResult, BrokerOptions, ExecOptions, Inventory, Overview, SandboxInfo, StoreOverview } from './broker-types.js';
import type { BrokerFiles } from './file-calls.js';
import type { KeptSandbox } from './egress-keeper.js';
import type { BrokerJobs } from './job-calls.js';
import type { BrokerObserver } from './observer.js';
import type { BrokerReapers } from './reapers.js';
import type { Binding } from './resolve-call.js';
import type { PooledSandbox, SandboxState } from './sandbox-measures.js';
import type { CloseResult } from './session-close.js';
import { SessionHandle } from './session-handle.js';
import type { SnapshotCalls } from './snapshot-calls.js';
import { cleanSpillDir, spillDirOf, spillMaxAgeMs } from './spill.js';
import type { TaskOverride } from './task-override.js';
import type { WarmPoolView } from './warm-pool.js';

export type { BrokerExecResult, BrokerOptions, ExecOptions, Inventory, Overview, SandboxInfo, StoreOverview } from './broker-types.js';
export type { BrokerObserver, CallObservation, ReapObservation } from './observer.js';
export type { CloseResult } from './session-close.js';
export type { KeeperStart, KeptSandbox } from './egress-keeper.js';
export type { EgressAuditEntry, EgressAuditFilter } from './state/egress-table.js';
export type { WarmPoolView } from './warm-pool.js';
export type { SnapshotCalls } from './snapshot-calls.js';
export type { ForkResult, RestoreResult, SnapshotInfo } from './snapshot-info.js';
export type { PooledSandbox } from './sandbox-measures.js';
export { SessionHandle } from './session-handle.js';

/** How often a long-lived broker runs the snapshot pass (retention is in days: once an hour would do; orphans go sooner). */
const SNAPSHOT_SWEEP_MS = 10 * 60 * 1000;

/**
 * The composition root: config, state store, backends, sandboxes and shells for one installation.
 *
 * @example
 * ```ts
 * await using broker = await Broker.open({ config: parseConfig({ backend: 'docker' }) });
 * const session = broker.session({ tenant: 'acme', session: 'chat-42' });
 * const r = await session.exec('cd /workspace && ls');
 * console.log(r.exitCode, r.stdout);
 * await session.close(); // removes the session's ephemeral sandbox
 * ```
 */
export class Broker implements AsyncDisposable {
  readonly installationId: string;
  /** Files in and out of a call's sandbox: upload, uploadStream, uploadTar, readFile, exportPath, mediaPath. */
  readonly files: BrokerFiles;
  /** Background jobs of a call's session: start, read, kill, list. */
  readonly jobs: BrokerJobs;
  /** The orphan reaper and disk checks on demand, and periodic tasks that stop with the broker. */
  readonly reapers: BrokerReapers;
  /** Snapshots of a call's sandbox, restore and fork: create, list, remove, restore, fork. */
  readonly snapshots: SnapshotCalls;

  private constructor(readonly config: BerthConfig, readonly berthHome: string, private readonly parts: BrokerParts) {
    this.installationId = parts.store.installationId;
    this.files = parts.files;
    this.jobs = parts.jobs;
    this.reapers = parts.reapers;
    this.snapshots = parts.snapshots;
  }

  /**
   * @internal The broker's connection to its state (`$BERTH_HOME/state.db`), for the token store
   * of a server in this process (`TokenStore.sharing`). Nothing else should write through it.
   */
  get stateConnection(): Database.Database {
    return this.parts.store.connection;
  }

  /** Reads config and state once; contacts no engine until a call needs one. */
  static async open(opts: BrokerOptions = {}): Promise<Broker> {
    const env = opts.env ?? process.env;
    const berthHome = opts.berthHome ?? defaultBerthHome(env);
    const config = opts.config ?? loadConfig({ configFlag: opts.configPath, cwd: opts.cwd ?? process.cwd(), berthHome });
    assertParsedConfig(config);
    const parts = buildParts(config, berthHome, opts);
    const broker = new Broker(config, berthHome, parts);

    cleanSpillDir(spillDirOf(berthHome), spillMaxAgeMs(config));
    parts.audit.prune();
    try {
      await parts.egress.open();
      await parts.pool.startWarmPools();
    } catch (err) {
      await broker.close();
      throw err;
    }
    parts.reapers.start();
    if (opts.reap ?? true) parts.reapers.every('snapshot sweep', SNAPSHOT_SWEEP_MS, async () => void (await parts.snapshotSweep.sweep()));
    return broker;
  }

  /** A handle bound to one call scope, with its `files` and `jobs`. */
  session(scope: CallScopeInput): SessionHandle {
    return new SessionHandle(this, scope);
  }

  /** The binding for a call: pure policy, no engine contacted (`--parent` registers its alias). */
  explain(scope: CallScopeInput = {}): Binding {
    return this.parts.calls.explain(scope);
  }

  /**
   * Whether the host guard keeps the call's sandbox from this host's services and the metadata
   * address (egress/host-guard.ts), read now and changed in nothing; undefined where no guard
   * applies (local, ssh, kubernetes; bwrap until a sandbox on the host's network started here).
   */
  async hostGuard(scope: CallScopeInput = {}): Promise<GuardStatus | undefined> {
    return this.parts.engines.hostGuard(this.explain(scope).backend, false);
  }

  /** Sets per-task overrides (image, backend, cwd, cwd source) for a task of this scope. */
  setTaskOverride(scope: CallScopeInput, override: TaskOverride): void {
    this.parts.calls.setTaskOverride(scope, override);
  }

  /** Runs one shell line in the call's sandbox, through its persistent shell. */
  exec(scope: CallScopeInput, command: string, opts: ExecOptions = {}): Promise<BrokerExecResult> {
    return this.parts.calls.exec(scope, command, opts);
  }

  /**
   * Closes a session: its shells, cwd records, aliases and overrides; removes ephemeral sandboxes no
   * other open session uses, and first the subagents registered under the session's task.
   */
  closeSession(scope: CallScopeInput): Promise<CloseResult> {
    return this.parts.calls.closeSession(scope);
  }

  /** This broker's warm pools and what each holds now (empty unless opened with `warmPool: true`). */
  warmPools(): WarmPoolView[] {
    return this.parts.warm.view();
  }

  /**
   * The unclaimed warm-pool sandboxes of this installation (every broker's) as the engines list
   * them, with their memory use (`berth ls`). Asks the engines of the config and the store.
   */
  pooledSandboxes(): Promise<PooledSandbox[]> {
    return this.parts.measures.pooled();
  }

  /** Resolves once the warm-pool fills under way have ended (tests, the bench). */
  warmPoolsSettled(): Promise<void> {
    return this.parts.warm.settled();
  }

  /**
   * Holds the sandboxes another berth process left with a background job (`berth __keep`), so
   * their egress proxies listen here and none is hibernated, until no job runs in one; calls
   * `ready` with the keys of those it holds. Resolves when none needs keeping, or the broker closes.
   */
  keepEgress(kept: readonly KeptSandbox[], ready?: (heldKeys: string[], servingKeys: string[]) => void): Promise<void> {
    this.parts.lifecycle.assertOpen();
    return this.parts.keeper.keep(kept, ready);
  }

  /** Removes the call's sandbox (persistent ones too) after closing its shells. */
  removeSandboxOf(scope: CallScopeInput): Promise<boolean> {
    return this.parts.calls.removeSandboxOf(scope);
  }

  /**
   * The snapshot pass of the periodic sweep, now: retention (`limits.snapshotRetentionDays`), fork
   * bases whose sandbox went, abandoned reservations, and backend snapshots no record names.
   * Returns what it removed.
   */
  sweepSnapshots(nowMs?: number): Promise<string[]> {
    return this.parts.snapshotSweep.sweep(nowMs);
  }

  /** Sandboxes of a tenant as the store knows them (no engine contacted). */
  list(tenant: string): SandboxInfo[] {
    return this.parts.views.list(tenant);
  }

  /**
   * Every tenant's sandboxes as the store knows them, each with its `tenant` (no engine
   * contacted): the operator's view on this host (`berth ls --all-tenants`). It crosses tenants,
   * so no tenant's token ever reaches it.
   */
  listAllTenants(): SandboxInfo[] {
    return this.parts.views.list(undefined);
  }

  /**
   * Every tenant's sandboxes with their state and what they use now, and the latest calls of
   * every tenant: the operator's view on this host (`berth top`). It crosses tenants, so no
   * tenant's token ever reaches it. With `tenant`, that tenant's sandboxes only and no calls
   * (the dashboard's stream, which reads the calls through the audit's profile filter).
   */
  overview(opts: { recentCalls: number; tenant?: string }): Promise<Overview> {
    return this.parts.views.overview(opts);
  }

  /**
   * What the store alone tells of every tenant (sandboxes, limits, latest calls and jobs): no
   * engine is asked, so it answers at once (`berth top` draws it while the engines are read).
   */
  storeOverview(opts: { recentCalls: number; recentJobs: number }): StoreOverview {
    return this.parts.views.storeOverview(opts);
  }

  /**
   * How many sessions are open now, by tenant and profile (the dashboard's chart). From the
   * state alone: no engine is asked.
   */
  openSessionCounts(): Array<{ tenant: string; profile: string; open: number }> {
    return this.parts.views.openSessionCounts();
  }

  /**
   * `list` plus each sandbox's state: `active` (open in this process), else what its engine says
   * (`running`, `stopped`, `missing`), or `unknown` when the engine does not answer.
   */
  listWithState(tenant: string): Promise<Array<SandboxInfo & { state: SandboxState }>> {
    return this.parts.views.listWithState(tenant);
  }

  /**
   * Every sandbox and session of this installation, of all tenants: the operator's view (the
   * server's metrics), never answered to a tenant. Sandbox states are `listWithState`'s; a
   * session is open while it is live (not closed, and held by a live process or used lately).
   */
  inventory(): Promise<Inventory> {
    return this.parts.views.inventory();
  }

  /** What the audit logs hold in memory because state.db refuses their writes, and dropped in all (the server's metrics). */
  stateBacklog(): ReturnType<StateStore['writeBacklog']> {
    return this.parts.store.writeBacklog();
  }

  /**
   * Adds an observer of every call, refusal and reaper removal (the server's metrics); returns
   * the function that removes it.
   */
  observe(observer: BrokerObserver): () => void {
    return this.parts.observers.add(observer);
  }

  /** Audit entries of one tenant (of the given profiles only, when `profiles` is set), newest first. */
  audit(filter: AuditFilter) {
    return this.parts.audit.list(filter);
  }

  /**
   * Egress decisions of one tenant (of the given profiles only, when `profiles` is set), newest
   * first: host, port, rule, allowed or refused, bytes, credential names; never a value.
   *
   * @example
   * broker.egressAudit({ tenant: 'local', session: 'chat-42', allowed: false, limit: 20 })
   */
  egressAudit(filter: EgressAuditFilter): EgressAuditEntry[] {
    return this.parts.audit.listEgress(filter);
  }

  /**
   * Shuts down: waits for in-flight calls (bounded), closes shells (their state snapshot is kept in
   * the sandbox), removes the ephemeral sandboxes of sessions this process holds, keeps the rest.
   */
  close(opts: { graceMs?: number } = {}): Promise<void> {
    return this.parts.lifecycle.close(() => closeParts(this.parts.closing, opts.graceMs ?? 10_000));
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}
