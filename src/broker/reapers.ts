import type { Sandbox } from '../backends/backend.js';
import { settingsFor } from '../config/types.js';
import type { BerthConfig } from '../setup/berth-config.js';
import type { AuditRecorder } from './audit.js';
import type { Engines } from './engines.js';
import { inUseNow, type LiveSandbox, type LiveSandboxes } from './live-sandboxes.js';
import type { BrokerObserver } from './observer.js';
import { ownerAlive } from '../kit/process-owner.js';
import { claimAbandoned } from './sandbox-claim.js';
import type { SandboxMeasures } from './sandbox-measures.js';
import type { SandboxRemoval } from './sandbox-removal.js';
import type { SessionCloser } from './session-close.js';
import type { SessionLinks } from './session-links.js';
import type { JobTable } from './state/job-table.js';
import type { SandboxRecord, SandboxTable } from './state/sandbox-table.js';
import type { SessionTable } from './state/session-table.js';
import type { Logger } from '../logging/logger.js';

/** How long a reaped mark waits for its session to come back (`SandboxTable.markReaped`): the audit's default retention. */
const REAPED_MARK_MS = 30 * 24 * 60 * 60 * 1000;

/** What a broker's reapers offer its users: the passes on demand, and a place for periodic work. */
export interface BrokerReapers {
  /**
   * Orphan reaper: this installation's sandboxes whose record is gone, or whose ephemeral sessions
   * are all closed, expired or held by a dead process, are removed (running or not) with their
   * dirs. Returns the names of the sandboxes removed.
   */
  reapOrphans(): Promise<string[]>;
  /** The disk checks of the periodic sweep, now (see `SandboxMeasures.enforceDiskLimits`); the keys of the sandboxes stopped. */
  enforceDiskLimits(): Promise<string[]>;
  /**
   * Runs `task` every `everyMs` until the returned function is called or the broker closes: never
   * two runs of it at once, and none once the broker began to close (which waits for a run under
   * way). A failure is logged; the next run still comes.
   *
   * @example
   * const stop = broker.reapers.every('mcp idle sessions', 15_000, () => closeIdleSessions());
   */
  every(name: string, everyMs: number, task: () => Promise<void>): () => void;
}

/** What the idle reaper asks of the jobs: whether one still runs in a sandbox (then it stays). */
export interface JobActivity {
  activeIn(digest: string, sandbox: Sandbox): Promise<boolean>;
}

/** What the orphan reaper asks of the warm pool: its label, and whether it keeps one of its sandboxes. */
export interface WarmKeeper {
  readonly owner: string;
  keeps(ref: string, shape: string): boolean;
}

export interface ReapersOptions {
  config: BerthConfig;
  sandboxes: Pick<SandboxTable, 'list' | 'get' | 'delete' | 'markReaped' | 'pruneReaped' | 'pruneHolders' | 'stampsBack'>;
  sessions: Pick<SessionTable, 'ofSandbox' | 'sandboxCountOf' | 'stampsBack'>;
  lives: Pick<LiveSandboxes, 'get' | 'all' | 'stampsBack'>;
  engines: Pick<Engines, 'names' | 'listManaged' | 'reapIdleNetworks' | 'releaseIdleDisks' | 'reapIdleGroups' | 'hostGuard'>;
  removal: Pick<SandboxRemoval, 'remove' | 'removeManaged' | 'hibernate' | 'hibernateUnheld'>;
  /** The jobs the store says still run in a sandbox (one never hibernates with a job running). */
  runningJobs: Pick<JobTable, 'runningIn'>;
  closer: Pick<SessionCloser, 'closeRef'>;
  links: Pick<SessionLinks, 'hasLiveSession'>;
  measures: Pick<SandboxMeasures, 'enforceDiskLimits'>;
  warm: WarmKeeper;
  jobs: JobActivity;
  audit: Pick<AuditRecorder, 'prune'>;
  /** Told of every sandbox a reaper removes (or stops, idle and persistent). */
  observer: Pick<BrokerObserver, 'reaped'>;
  /** Run the orphan reaper at first engine use and periodically (and the periodic sweep at all). */
  reap: boolean;
  /** Set once the broker began to close: no pass starts after that, and one under way stops early. */
  shutdown: AbortSignal;
  log: Logger;
}

interface Periodic {
  timer: NodeJS.Timeout;
  running: Promise<void> | undefined;
}

/**
 * The broker's background passes: one sweep loop (disk checks, the idle reaper, stale holder rows, audit retention,
 * the orphan reaper), one pass at a time and never after close began, plus the periodic tasks
 * other parts register (`every`).
 */
export class Reapers implements BrokerReapers {
  private timer: NodeJS.Timeout | undefined;
  private sweeping: Promise<void> | undefined;
  private reaped: Promise<void> | undefined;
  private readonly periodic = new Set<Periodic>();

  constructor(private readonly opts: ReapersOptions) {}

  /** Starts the periodic sweep (when `reap`): every quarter of the shortest idle time, 1 s to 60 s. */
  start(): void {
    if (!this.opts.reap) return;
    const everyMs = Math.min(60_000, Math.max(1_000, minIdleMs(this.opts.config) / 4));
    this.timer = setInterval(() => void this.sweep(), everyMs);
    this.timer.unref();
  }

  /** Stops every timer and waits for the passes under way. */
  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    for (const p of this.periodic) clearInterval(p.timer);
    await this.sweeping;
    await Promise.all([...this.periodic].map((p) => p.running));
    this.periodic.clear();
  }

  every(name: string, everyMs: number, task: () => Promise<void>): () => void {
    const p: Periodic = {
      running: undefined,
      timer: setInterval(() => {
        if (p.running !== undefined || this.opts.shutdown.aborted) return;
        p.running = task()
          .catch((e: unknown) => this.opts.log.child('berth:reaper').warn(`${name} failed: ${String(e)}`))
          .finally(() => {
            p.running = undefined;
          });
      }, everyMs),
    };
    p.timer.unref();
    this.periodic.add(p);
    return () => {
      clearInterval(p.timer);
      this.periodic.delete(p);
    };
  }

  enforceDiskLimits(): Promise<string[]> {
    return this.opts.measures.enforceDiskLimits();
  }

  /** The first orphan pass, on the first engine a call uses (once per broker; waited for by every call that gets here). */
  reapOrphansOnce(engine: string): Promise<void> {
    if (!this.opts.reap) return Promise.resolve();
    this.reaped ??= this.reapOrphans([engine]).then(
      () => undefined,
      (e: unknown) => this.opts.log.child('berth:reaper').warn(`orphan reap failed: ${String(e)}`),
    );
    return this.reaped;
  }

  async reapOrphans(only?: readonly string[]): Promise<string[]> {
    const { sandboxes, lives, engines: engineParts, removal, warm, log } = this.opts;
    const removed: string[] = [];
    const engines = await engineParts.names(only);
    for (const engine of engines) {
      let managed;
      try {
        managed = await engineParts.listManaged(engine);
      } catch (e) {
        // One unreachable engine must not stop the reaper; the store-driven pass below still runs.
        log.child('berth:reaper').warn(`list ${engine} sandboxes: ${String(e)}`);
        continue;
      }
      for (const m of managed) {
        let digest = m.digest;
        if (m.pool !== undefined) {
          // Asked before the store: a claim records its sandbox before the pool lets go of it.
          if (m.pool.owner === warm.owner && warm.keeps(m.ref, m.pool.shape)) continue;
          const claimed = sandboxes.list().find((r) => r.backend === engine && r.ref === m.ref);
          if (claimed === undefined) {
            // Unclaimed: another live broker's pool is its own; one of a dead broker, or of a
            // shape this broker no longer keeps, goes.
            if (m.pool.owner !== warm.owner && ownerAlive(m.pool.owner)) continue;
            await removal.removeManaged(engine, m.ref).catch((e) => log.child('berth:reaper').warn(`remove ${m.name}: ${String(e)}`));
            removed.push(m.name);
            this.opts.observer.reaped({ reason: 'orphan', tenant: undefined, backend: engine });
            continue;
          }
          // Claimed: the identity's sandbox, known by the ref its record holds.
          digest = claimed.digest;
        }
        const rec = sandboxes.get(digest);
        // A process that died while creating an ephemeral sandbox left a container and a claim with
        // no ref: both go. (A persistent one is adopted by the next call that claims it.)
        const abandoned = rec !== undefined && m.ephemeral && rec.ref === '' && claimAbandoned(rec, Date.now());
        if (rec === undefined || (rec.ref !== '' && rec.ref !== m.ref) || abandoned) {
          if (lives.get(digest) !== undefined) continue;
          // A restore under way: its new sandbox exists before its record names it.
          if (rec?.replacedBy != null && ownerAlive(rec.replacedBy)) continue;
          await removal.removeManaged(engine, m.ref).catch((e) => log.child('berth:reaper').warn(`remove ${m.name}: ${String(e)}`));
          if (abandoned) sandboxes.delete(digest);
          removed.push(m.name);
          this.opts.observer.reaped({ reason: 'orphan', tenant: rec?.tenant, backend: engine });
        }
      }
    }
    for (const rec of sandboxes.list()) {
      if (!rec.ephemeral || lives.get(rec.digest)?.inflight) continue;
      if (rec.ref === '' && !claimAbandoned(rec, Date.now())) continue; // being created right now
      if (!this.opts.links.hasLiveSession(rec)) {
        this.markIfOpen(rec.digest);
        await removal.remove(rec).catch((e) => log.child('berth:reaper').warn(`remove ${rec.key}: ${String(e)}`));
        removed.push(rec.name);
        this.opts.observer.reaped({ reason: 'orphan', tenant: rec.tenant, backend: rec.backend });
      }
    }
    sandboxes.pruneReaped(Date.now() - REAPED_MARK_MS);
    // Last, so the networks and mounts of the sandboxes just removed go too.
    for (const engine of engines) {
      await engineParts.reapIdleNetworks(engine).catch((e) => log.child('berth:reaper').warn(`reap ${engine} networks: ${String(e)}`));
      await engineParts.releaseIdleDisks(engine).catch((e) => log.child('berth:reaper').warn(`release ${engine} disks: ${String(e)}`));
      await engineParts.reapIdleGroups(engine).catch((e) => log.child('berth:reaper').warn(`reap ${engine} process groups: ${String(e)}`));
      // A firewall reload removes the host guard's rules long after berth installed them.
      await engineParts.hostGuard(engine, true).catch((e) => log.child('berth:reaper').warn(`keep ${engine} host guard: ${String(e)}`));
    }
    return removed;
  }

  /** Idle reaper + periodic orphan reaper; one at a time, and never after close() began. */
  private sweep(): Promise<void> {
    this.sweeping ??= this.sweepOnce()
      .catch((e: unknown) => this.opts.log.child('berth:reaper').warn(`sweep failed: ${String(e)}`))
      .finally(() => {
        this.sweeping = undefined;
      });
    return this.sweeping;
  }

  private async sweepOnce(): Promise<void> {
    const { sessions, lives, removal, closer, measures, shutdown, log } = this.opts;
    this.stampsBack(Date.now());
    await measures.enforceDiskLimits().catch((e: unknown) => log.child('berth:reaper').warn(`disk check failed: ${String(e)}`));
    for (const live of lives.all()) {
      if (shutdown.aborted) return;
      const now = Date.now();
      // An ephemeral sandbox goes after idleSeconds; a persistent one hibernates after hibernateSeconds (0: never).
      const afterMs = live.record.ephemeral ? live.idleMs : live.hibernateMs;
      if (afterMs === 0 || !(await this.isIdle(live, now, afterMs)) || shutdown.aborted) continue;
      const idleFor = `idle for ${Math.round((now - live.lastActivityMs) / 1000)}s`;
      if (live.record.ephemeral) {
        log.child('berth:reaper').info(`sandbox ${live.record.key} ${idleFor}; removing it`);
        this.opts.observer.reaped({ reason: 'idle', tenant: live.record.tenant, backend: live.record.backend });
        // Only this sandbox goes; a session is closed only once it has no other sandbox left,
        // so an idle sandbox never takes a busy one of the same session with it.
        const open = sessions.ofSandbox(live.digest).filter((x) => x.closedMs === null);
        this.markIfOpen(live.digest);
        await removal.remove(live.record).catch((e) => log.child('berth:reaper').warn(`remove ${live.record.key}: ${String(e)}`));
        for (const x of open) {
          if (!shutdown.aborted && sessions.sandboxCountOf(x.tenant, x.profile, x.session) === 0) {
            await closer.closeRef(x.tenant, x.profile, x.session).catch(() => undefined);
          }
        }
      } else if (await removal.hibernate(live, () => this.isIdle(live, Date.now(), afterMs))) {
        log.child('berth:reaper').info(`sandbox ${live.record.key} ${idleFor}; hibernated`);
        this.opts.observer.reaped({ reason: 'hibernated', tenant: live.record.tenant, backend: live.record.backend });
      }
    }
    if (shutdown.aborted) return;
    await this.hibernateUnheld();
    if (shutdown.aborted) return;
    // A process that ended without letting go (killed, crashed) still has its holder rows: drop them.
    this.opts.sandboxes.pruneHolders((owner) => !ownerAlive(owner));
    this.opts.audit.prune();
    if (this.opts.reap) await this.reapOrphans().catch((e) => log.child('berth:reaper').warn(String(e)));
  }

  /**
   * Stamps from before the wall clock stepped back (more than STAMP_AHEAD_MS ahead of now) are set
   * to now, in the store and in this process: else they would keep their sandboxes and sessions
   * from going idle until the clock caught up (a touch replaces one too, but an idle one gets none).
   */
  private stampsBack(nowMs: number): void {
    this.opts.sandboxes.stampsBack(nowMs);
    this.opts.sessions.stampsBack(nowMs);
    this.opts.lives.stampsBack(nowMs);
  }

  /** Marks a sandbox about to be reaped whose sessions are not all closed: the next call on it hears it was recreated. */
  private markIfOpen(digest: string): void {
    if (this.opts.sessions.ofSandbox(digest).some((s) => s.closedMs === null)) this.opts.sandboxes.markReaped(digest, Date.now());
  }

  /**
   * In-flight commands, busy shells, background jobs and running jobs all count as activity. A
   * busy shell or a running job seen by a sweep is activity at that moment, so the idle time
   * counts from its end: a job's output stays readable for `idleSeconds` after it ended, instead
   * of going with its sandbox in the sweep that first saw it end.
   */
  private async isIdle(live: LiveSandbox, now: number, afterMs: number): Promise<boolean> {
    if (live.inflight > 0 || now - live.lastActivityMs < afterMs) return false;
    if (await inUseNow(live, this.opts.jobs)) {
      live.lastActivityMs = Math.max(live.lastActivityMs, now);
      return false;
    }
    return live.inflight === 0;
  }

  /**
   * Hibernates the persistent sandboxes that no live process holds (the one that brought each up
   * ended: a CLI call, a berth that crashed) once idle for their `hibernateSeconds`, unless a job
   * still runs in one. The idle time counts from the store's `last used`.
   */
  private async hibernateUnheld(): Promise<void> {
    const { sandboxes, removal, shutdown, log } = this.opts;
    for (const rec of sandboxes.list()) {
      if (shutdown.aborted) return;
      if (!this.unheldAndIdle(rec, Date.now())) continue;
      const stillUnheld = (): boolean => {
        const now = sandboxes.get(rec.digest);
        return now !== undefined && now.ref === rec.ref && this.unheldAndIdle(now, Date.now());
      };
      if (await removal.hibernateUnheld(rec, stillUnheld)) {
        log.child('berth:reaper').info(`sandbox ${rec.key} unused since ${new Date(rec.lastUsedMs).toISOString()} by a process that ended; hibernated`);
        this.opts.observer.reaped({ reason: 'hibernated', tenant: rec.tenant, backend: rec.backend });
      }
    }
  }

  private unheldAndIdle(rec: SandboxRecord, now: number): boolean {
    if (rec.ephemeral || rec.ref === '' || (rec.hibernatedMs ?? null) !== null || this.opts.lives.get(rec.digest) !== undefined) return false;
    const afterMs = settingsFor(this.opts.config, rec.profile ?? 'default').lifecycle.hibernateSeconds * 1000;
    if (afterMs === 0 || now - rec.lastUsedMs < afterMs) return false;
    if (rec.heldBy !== null && rec.heldBy !== undefined && ownerAlive(rec.heldBy)) return false;
    return this.opts.runningJobs.runningIn(rec.digest).length === 0;
  }
}

/** The shortest time after which some sandbox is removed or hibernated: the sweep runs at a quarter of it. */
function minIdleMs(config: BerthConfig): number {
  const times = [config.base, ...Object.values(config.profiles)]
    .flatMap((p) => [p.lifecycle.idleSeconds, p.lifecycle.hibernateSeconds])
    .filter((t) => t > 0);
  return Math.min(...times) * 1000;
}
