import type Database from 'better-sqlite3';
import { homedir } from 'node:os';
import { defaultBerthHome, loadConfig } from '../config/load.js';
import { readSecretsFiles } from '../config/secrets-file.js';
import type { BerthConfig } from '../config/types.js';
import { BerthError, PolicyRefusedError } from '../errors.js';
import { StagingLedger } from '../files/staging-quota.js';
import { assertAllowedRootsExist } from '../policy/allowed-roots.js';
import { debugSink } from '../logging/debug-sink.js';
import { assertVolumesAllowed } from '../policy/volumes.js';
import type { CallScopeInput } from '../scope/call-scope.js';
import { hostGroupsUnusable } from '../backends/cgroups/cgroup-host.js';
import { AuditRecorder, type AuditFilter } from './audit.js';
import type { BrokerExecResult, BrokerOptions, ExecOptions, Inventory, Overview, SandboxInfo } from './broker-types.js';
import { CallResolver } from './call-resolver.js';
import { CommandRunner } from './command-runner.js';
import { BrokerFiles } from './file-calls.js';
import { BrokerJobs } from './job-calls.js';
import { JobRunner } from './jobs.js';
import { Observers, type BrokerObserver } from './observer.js';
import { ownerToken } from './process-owner.js';
import { Reapers, type BrokerReapers } from './reapers.js';
import type { Binding } from './resolve-call.js';
import { SandboxPool, type PooledSandbox, type SandboxState } from './sandbox-pool.js';
import { SessionHandle } from './session-handle.js';
import { SessionRegistry, type CloseResult } from './sessions.js';
import { ShellPool } from './shell-pool.js';
import { cleanSpillDir, spillDirOf, spillMaxAgeMs } from './spill.js';
import { StartGate } from './start-gate.js';
import type { SandboxRecord } from './state/sandbox-table.js';
import { StateStore } from './state/state-store.js';
import { TaskOverrideSchema, type TaskOverride } from './task-override.js';
import type { WarmPoolView } from './warm-pool.js';

export type { BrokerExecResult, BrokerOptions, ExecOptions, Inventory, Overview, SandboxInfo } from './broker-types.js';
export type { BrokerObserver, CallObservation, ReapObservation } from './observer.js';
export type { CloseResult } from './sessions.js';
export type { WarmPoolView } from './warm-pool.js';
export type { PooledSandbox } from './sandbox-pool.js';
export { SessionHandle } from './session-handle.js';

const DOCKER_SOCKETS = ['/var/run/docker.sock', '/run/docker.sock'];

/** The parts of one broker, built by `Broker.open`. */
interface Parts {
  store: StateStore;
  resolver: CallResolver;
  audit: AuditRecorder;
  pool: SandboxPool;
  commands: CommandRunner;
  sessions: SessionRegistry;
  reapers: Reapers;
  files: BrokerFiles;
  jobs: BrokerJobs;
  observers: Observers;
  /** Aborted when `close()` begins. */
  shutdown: AbortController;
}

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
  private closing: Promise<void> | undefined;

  private constructor(readonly config: BerthConfig, readonly berthHome: string, private readonly parts: Parts) {
    this.installationId = parts.store.installationId;
    this.files = parts.files;
    this.jobs = parts.jobs;
    this.reapers = parts.reapers;
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
    const secrets = readSecretsFiles(config);
    const homeDir = homedir();
    const dockerSockets = dockerSocketsOf(env);
    assertVolumesAllowed(config, { homeDir, stateDir: berthHome, dockerSockets });
    assertAllowedRootsExist(config);
    const store = StateStore.open(berthHome, { auditMaxCommandChars: config.audit.maxCommandChars });

    const log = opts.log ?? debugSink(env['BERTH_DEBUG'], (line) => void process.stderr.write(line)) ?? (() => {});
    const shutdown = new AbortController();
    const assertOpen = (): void => assertRunning(shutdown.signal);
    const owner = opts.holdSessions === false ? null : ownerToken();
    // What explain says of the kill (the backends check each sandbox again as they start it).
    const grouping = { host: hostGroupsUnusable() === undefined, engineOnHost: engineOnThisHost(env) };
    const resolver = new CallResolver(
      { config, store, berthHome, homeDir, dockerSockets, hostEnv: Object.freeze({ ...env }), secrets, grouping },
      env['BERTH_SESSION'] || undefined,
    );
    const observers = new Observers();
    const audit = new AuditRecorder(store, { retentionDays: config.audit.retentionDays, log: (m) => log('berth:audit', m), observer: observers });
    const gate = opts.startGate ?? StartGate.forThisMachine();
    const shells = new ShellPool({ store, longLived: owner !== null, spillDir: (opts.spillOutput ?? true) ? spillDirOf(berthHome) : undefined, gate });
    const pool: SandboxPool = new SandboxPool({
      store, config, berthHome, backends: opts.backends, shutdown: shutdown.signal, log, gate,
      warmPool: opts.warmPool === true, poolClaimed: (o) => observers.poolClaimed(o),
      hooks: {
        link: (call, live) => sessions.link(call, live),
        endJobs: (digest, sandbox) => runner.killAllIn(digest, sandbox),
        checked: (engine) => reapers.reapOrphansOnce(engine),
      },
    });
    const sessions = new SessionRegistry({ store, config, berthHome, owner, pool, audit, log });
    const commands = new CommandRunner({ pool, shells, sessions, shutdown: shutdown.signal, log });
    const runner: JobRunner = new JobRunner({
      store,
      resolve: (scope) => resolver.resolve(scope),
      policy: () => resolver.policy(),
      sandboxFor: async (call) => (await pool.acquire(call)).sandbox,
      run: (call, line, o) => commands.run(call, line, { workdir: o.workdir, stdin: o.stdin, timeoutSeconds: 30, group: o.group }),
      existingSandbox: (call, digest) => pool.existing(call, digest),
      audit: (call, command, startedMs) => audit.record({ kind: 'job', call, command, exitCode: null, startedMs }),
      log: (m) => log('berth:jobs', m),
    });
    const reapers: Reapers = new Reapers({
      store, config, pool, sessions, audit, observer: observers, jobsActiveIn: (digest, sandbox) => runner.activeIn(digest, sandbox),
      reap: opts.reap ?? true, shutdown: shutdown.signal, log,
    });
    const files = new BrokerFiles({
      resolver, sessions, audit, assertOpen, berthHome, stagingBytes: config.limits.stagingBytes, stagingLedger: new StagingLedger(berthHome), log,
    });
    const jobs = new BrokerJobs({ resolver, runner, assertOpen });
    const broker = new Broker(config, berthHome, { store, resolver, audit, pool, commands, sessions, reapers, files, jobs, observers, shutdown });

    cleanSpillDir(spillDirOf(berthHome), spillMaxAgeMs(config));
    audit.prune();
    try {
      await pool.startWarmPools();
    } catch (err) {
      await broker.close();
      throw err;
    }
    reapers.start();
    return broker;
  }

  /** A handle bound to one call scope, with its `files` and `jobs`. */
  session(scope: CallScopeInput): SessionHandle {
    return new SessionHandle(this, scope);
  }

  /** The binding for a call: pure policy, no engine contacted (`--parent` registers its alias). */
  explain(scope: CallScopeInput = {}): Binding {
    return this.parts.resolver.resolve(scope).binding;
  }

  /** Sets per-task overrides (image, backend, cwd, cwd source) for a task of this scope. */
  setTaskOverride(scope: CallScopeInput, override: TaskOverride): void {
    const s = this.parts.resolver.normalize(scope);
    if (s.task === undefined) throw new PolicyRefusedError('a task override needs a task id (scope.task)');
    const parsed = TaskOverrideSchema.parse(override);
    this.parts.store.scopes.putTaskOverride(s.tenant, s.profile, s.task, parsed, s.session ?? null);
    // Validate now so a forbidden backend is refused when it is set, not at the next call.
    this.parts.resolver.resolve(s);
  }

  /** Runs one shell line in the call's sandbox, through its persistent shell. */
  async exec(scope: CallScopeInput, command: string, opts: ExecOptions = {}): Promise<BrokerExecResult> {
    this.assertOpen();
    const call = this.parts.resolver.resolve(scope, { withCwd: false });
    const started = Date.now();
    const facts = { cold: false };
    let result: BrokerExecResult | undefined;
    let errorCode: string | undefined;
    try {
      result = await this.parts.commands.run(call, command, opts, facts);
      return result;
    } catch (err) {
      errorCode = err instanceof BerthError ? err.code : 'internal';
      throw err;
    } finally {
      this.parts.audit.record({
        kind: 'exec', call, command, exitCode: result?.exitCode ?? null, startedMs: started,
        outcome: { cold: facts.cold, timedOut: result?.timedOut ?? false, errorCode },
      });
    }
  }

  /**
   * Closes a session: its shells, cwd records, aliases and overrides; removes ephemeral sandboxes no
   * other open session uses, and first the subagents registered under the session's task.
   */
  closeSession(scope: CallScopeInput): Promise<CloseResult> {
    return this.parts.sessions.close(this.parts.resolver.normalize(scope));
  }

  /** This broker's warm pools and what each holds now (empty unless opened with `warmPool: true`). */
  warmPools(): WarmPoolView[] {
    return this.parts.pool.warmPools();
  }

  /**
   * The unclaimed warm-pool sandboxes of this installation (every broker's) as the engines list
   * them, with their memory use (`berth ls`). Asks the engines of the config and the store.
   */
  pooledSandboxes(): Promise<PooledSandbox[]> {
    return this.parts.pool.pooled();
  }

  /** Resolves once the warm-pool fills under way have ended (tests, the bench). */
  warmPoolsSettled(): Promise<void> {
    return this.parts.pool.warmPoolsSettled();
  }

  /** Removes the call's sandbox (persistent ones too) after closing its shells. */
  async removeSandboxOf(scope: CallScopeInput): Promise<boolean> {
    const call = this.parts.resolver.resolve(scope);
    const rec = this.parts.store.sandboxes.get(call.spec.digest);
    if (rec === undefined) return false;
    await this.parts.pool.remove(rec);
    return true;
  }

  /** Sandboxes of a tenant as the store knows them (no engine contacted). */
  list(tenant: string): SandboxInfo[] {
    return this.infoOf(this.parts.store.sandboxes.list(tenant));
  }

  /**
   * Every tenant's sandboxes with their state and what they use now, and the latest calls of
   * every tenant: the operator's view on this host (`berth top`). It crosses tenants, so no
   * tenant's token ever reaches it. With `tenant`, that tenant's sandboxes only and no calls
   * (the dashboard's stream, which reads the calls through the audit's profile filter).
   */
  async overview(opts: { recentCalls: number; tenant?: string }): Promise<Overview> {
    const records = this.parts.store.sandboxes.list(opts.tenant);
    const [stateOf, usage] = await Promise.all([this.parts.pool.stateReader(records), this.parts.pool.usage(records)]);
    const infos = this.infoOf(records);
    const quota = this.parts.pool.tenantQuota;
    return {
      sandboxes: records.map((r, i) => ({ ...(infos[i] as SandboxInfo), state: stateOf(r), usage: usage.get(r.digest) })),
      tenants: [...this.parts.store.sandboxes.tenantUsage(opts.tenant)].map(([tenant, used]) => ({ tenant, usage: used, quota })),
      recentCalls: opts.tenant === undefined ? this.parts.store.audit.recent(opts.recentCalls) : [],
    };
  }

  /**
   * How many sessions are open now, by tenant and profile (the dashboard's chart). From the
   * state alone: no engine is asked.
   */
  openSessionCounts(): Array<{ tenant: string; profile: string; open: number }> {
    const { store, sessions } = this.parts;
    const counts = new Map<string, { tenant: string; profile: string; open: number }>();
    for (const s of store.sessions.list()) {
      if (!sessions.isLive(s, s)) continue;
      const key = JSON.stringify([s.tenant, s.profile]);
      const c = counts.get(key) ?? { tenant: s.tenant, profile: s.profile, open: 0 };
      c.open++;
      counts.set(key, c);
    }
    return [...counts.values()];
  }

  private infoOf(records: readonly SandboxRecord[]): SandboxInfo[] {
    const { store, sessions } = this.parts;
    return records.map((r) => ({
      sandboxKey: r.key, tenant: r.tenant, profile: r.profile, backend: r.backend, rule: r.rule, persistent: !r.ephemeral,
      name: r.name, mount: r.mount, createdMs: r.createdMs, lastUsedMs: r.lastUsedMs,
      sessions: store.sessions.ofSandbox(r.digest).map((s) => ({ session: s.session, open: sessions.isLive(s, r) })),
    }));
  }

  /**
   * `list` plus each sandbox's state: `active` (open in this process), else what its engine says
   * (`running`, `stopped`, `missing`), or `unknown` when the engine does not answer.
   */
  async listWithState(tenant: string): Promise<Array<SandboxInfo & { state: SandboxState }>> {
    const records = this.parts.store.sandboxes.list(tenant);
    const stateOf = await this.parts.pool.stateReader(records);
    return this.list(tenant).map((info) => {
      const rec = records.find((r) => r.key === info.sandboxKey && r.profile === info.profile);
      return { ...info, state: rec === undefined ? 'unknown' : stateOf(rec) };
    });
  }

  /**
   * Every sandbox and session of this installation, of all tenants: the operator's view (the
   * server's metrics), never answered to a tenant. Sandbox states are `listWithState`'s; a
   * session is open while it is live (not closed, and held by a live process or used lately).
   */
  async inventory(): Promise<Inventory> {
    const { store, pool, sessions } = this.parts;
    const records = store.sandboxes.list();
    const stateOf = await pool.stateReader(records);
    return {
      sandboxes: records.map((r) => ({ tenant: r.tenant, backend: r.backend, persistent: !r.ephemeral, state: stateOf(r) })),
      // Open and live: a session whose holder died is open in the store until the reaper's next pass.
      sessions: store.sessions.list().map((s) => ({ tenant: s.tenant, open: sessions.isLive(s, s) })),
    };
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
   * Shuts down: waits for in-flight calls (bounded), closes shells (their state snapshot is kept in
   * the sandbox), removes the ephemeral sandboxes of sessions this process holds, keeps the rest.
   */
  async close(opts: { graceMs?: number } = {}): Promise<void> {
    if (this.closing === undefined) {
      this.parts.shutdown.abort();
      this.closing = this.doClose(opts.graceMs ?? 10_000);
    }
    return this.closing;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  private async doClose(graceMs: number): Promise<void> {
    const { reapers, pool, sessions, store } = this.parts;
    await reapers.stop();
    const deadline = Date.now() + graceMs;
    while (pool.all().some((l) => l.inflight > 0) && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 20));
    }
    await sessions.closeHeld();
    await pool.close();
    store.close();
  }

  private assertOpen(): void {
    assertRunning(this.parts.shutdown.signal);
  }
}

function assertRunning(shutdown: AbortSignal): void {
  if (shutdown.aborted) throw new BerthError('shutting_down', 'berth is shutting down; retry the call on a running berth');
}

/** The docker engine berth talks to is this machine's (a unix socket), not one over TCP or SSH. */
function engineOnThisHost(env: NodeJS.ProcessEnv): boolean {
  const dockerHost = env['DOCKER_HOST'];
  return dockerHost === undefined || dockerHost === '' || dockerHost.startsWith('unix://');
}

function dockerSocketsOf(env: NodeJS.ProcessEnv): string[] {
  const dockerHost = env['DOCKER_HOST'];
  return dockerHost?.startsWith('unix://') ? [...DOCKER_SOCKETS, dockerHost.slice('unix://'.length)] : DOCKER_SOCKETS;
}
