import { existsSync } from 'node:fs';
import type { Backend, ManagedSandbox, Sandbox, SandboxUsage } from '../backends/backend.js';
import { reservationOf, sectionOf, type BackendTraits } from '../backends/module.js';
import type { BerthConfig } from '../config/types.js';
import { Logger } from '../logging/logger.js';
import { PolicyRefusedError, type BerthError } from '../errors.js';
import { BackendRegistry } from './backend-registry.js';
import { KeyedLock } from '../kit/keyed-lock.js';
import { ownerToken } from './process-owner.js';
import type { ResolvedCall } from './resolve-call.js';
import { claimOrAwait } from './sandbox-claim.js';
import { SandboxShells } from './shell-pool.js';
import type { StartGate } from './start-gate.js';
import type { SandboxRecord, TenantQuota } from './state/sandbox-table.js';
import type { StateStore } from './state/state-store.js';
import { tenantQuota } from './tenant-quota.js';
import { storeLease } from './store-lease.js';
import { WarmPool, type WarmClaim, type WarmPoolView } from './warm-pool.js';

/** Time one disk-check pass may take (a measurement costs the engine a walk of the writable layer). */
const DISK_CHECK_BUDGET_MS = 10_000;
/** Bound of each engine request of the close pass that removes networks no sandbox uses. */
const CLOSE_NETWORK_PASS_MS = 5_000;
/** A container this close to its pids limit when a shell cannot start counts as out of processes. */
const PIDS_HEADROOM = 8;

type Claim = Awaited<ReturnType<typeof claimOrAwait>>;

/** A sandbox this process holds, with what its calls, shells and reapers track about it. */
export interface LiveSandbox {
  readonly digest: string;
  readonly sandbox: Sandbox;
  readonly record: SandboxRecord;
  /** What its backend does (its processes die with it, its engine lists it, ...). */
  readonly traits: Readonly<BackendTraits>;
  readonly idleMs: number;
  inflight: number;
  lastActivityMs: number;
  /** The backend recreated a sandbox removed out of band; the next result says so. */
  recreatedUnreported: boolean;
  /** Its persistent shells and its warden. */
  readonly shells: SandboxShells;
  /** Sessions linked to this sandbox by this process, with when `last_seen` was last written. */
  readonly sessions: Map<string, number>;
  /** When its disk use was last measured (0: never). */
  diskCheckedMs: number;
  /** Set when it went over its disk bound: calls in flight on it end with this error. */
  diskBreach?: BerthError;
}

/** What the pool asks of the other parts (given by the composition root). */
export interface PoolHooks {
  /** A call got its sandbox (under the identity's lock when it was not live yet): link the call's session. */
  link(call: ResolvedCall, live: LiveSandbox): void;
  /** A sandbox whose processes outlive it (a host dir) is about to be removed: end its jobs. */
  endJobs(digest: string, sandbox: Sandbox): Promise<void>;
  /** A backend passed its check for a new profile or image (the reapers' first orphan pass). */
  checked(backend: string): Promise<void>;
}

export interface SandboxPoolOptions {
  store: StateStore;
  config: BerthConfig;
  berthHome: string;
  /** Injected backends (tests), by module name. */
  backends?: Readonly<Record<string, Backend | undefined>> | undefined;
  /** Set once the broker began to close: nothing is measured or restarted after that. */
  shutdown: AbortSignal;
  log: (namespace: string, message: string) => void;
  hooks: PoolHooks;
  /** Bounds the sandboxes created or adopted at once (shared with the shell pool's starts). */
  gate: StartGate;
  /** Keep the warm pools the config asks for (a long-lived broker); default: none. */
  warmPool?: boolean | undefined;
  /** Told of each call that could come from a warm pool: whether it did. */
  poolClaimed?: ((o: { backend: string; hit: boolean }) => void) | undefined;
}

export type SandboxState = 'active' | 'running' | 'stopped' | 'missing' | 'unknown';

/** One unclaimed warm-pool sandbox as its engine lists it. */
export interface PooledSandbox {
  backend: string;
  ref: string;
  name: string;
  /** Its pool's shape digest. */
  shape: string;
  /** The broker that made it (`pid:starttime:nonce`). */
  owner: string;
  running: boolean;
  memoryBytes: number | undefined;
}

/**
 * The sandboxes of one broker: get-or-create under the identity's lock and the cross-process
 * claim, reattach, recreate, stop, remove, measure. The only part of the broker that calls a
 * `Backend`; the backends are created here, on first use.
 */
export class SandboxPool {
  private readonly backends: BackendRegistry;
  private readonly live = new Map<string, LiveSandbox>();
  /** The backend of each live sandbox: kept here, so nothing outside the pool calls it. */
  private readonly backendOf = new WeakMap<LiveSandbox, Backend>();
  private readonly locks = new KeyedLock();
  /** Backends on which this process removed a sandbox: the close pass looks for what it left idle there. */
  private readonly removedOn = new Set<string>();
  /** Backend, profile and image combinations whose check passed. */
  private readonly checkedKeys = new Set<string>();
  /** This process (`pid:starttime`), on the creation claims it makes. */
  private readonly processToken = ownerToken();
  private readonly log: (namespace: string, message: string) => void;
  private readonly logger: Logger;
  private readonly warm: WarmPool;
  /** What one tenant's sandboxes may add up to (limits.sandboxes, memoryMb, diskMb). */
  private readonly quota: TenantQuota;

  constructor(private readonly opts: SandboxPoolOptions) {
    this.quota = tenantQuota(opts.config.limits, opts.berthHome);
    this.log = opts.log;
    this.logger = new Logger(opts.log);
    this.backends = new BackendRegistry({
      catalog: opts.config.backends, berthHome: opts.berthHome, installation: opts.store.installationId, injected: opts.backends,
      log: this.logger, lease: storeLease(opts.store), profiles: [opts.config.base, ...Object.values(opts.config.profiles)],
    });
    this.warm = new WarmPool({
      config: opts.config, backend: (name) => this.backends.get(name), gate: opts.gate, fill: opts.warmPool === true,
      mayKillAll: (name) => opts.config.backends.traits(name).ownsProcessTable,
      claimed: (o) => opts.poolClaimed?.(o), log: this.logger.child('berth:pool'),
    });
  }

  /**
   * A long-lived broker's start: checks the warm pools the config asks for and starts filling
   * them, and starts the first orphan pass on their engines (not waited for), so the pool
   * sandboxes of a broker that died or of a shape no longer configured go now, not at the first call.
   */
  async startWarmPools(): Promise<void> {
    for (const engine of await this.warm.start()) void this.opts.hooks.checked(engine);
  }

  /** The warm pools of this broker and what they hold. */
  warmPools(): WarmPoolView[] {
    return this.warm.view();
  }

  /** Waits for the warm-pool fills under way (tests, the bench). */
  warmPoolsSettled(): Promise<void> {
    return this.warm.settled();
  }

  /** The label this broker puts on its pool sandboxes, and whether it keeps one (the reapers ask). */
  get warmOwner(): string {
    return this.warm.owner;
  }

  warmKeeps(ref: string, shape: string): boolean {
    return this.warm.keeps(ref, shape);
  }

  get(digest: string): LiveSandbox | undefined {
    return this.live.get(digest);
  }

  all(): LiveSandbox[] {
    return [...this.live.values()];
  }

  /** Get-or-create under the identity's lock: concurrent first calls create one sandbox. */
  acquire(call: ResolvedCall): Promise<LiveSandbox> {
    const existing = this.live.get(call.spec.digest);
    if (existing !== undefined && this.backend(existing).name === call.settings.backend) {
      // Hot path: no lock and no store write unless this session is new to the sandbox.
      this.assertMountFits(call, existing.record);
      this.opts.hooks.link(call, existing);
      return Promise.resolve(existing);
    }
    return this.locks.run(`sandbox:${call.spec.digest}`, async () => {
      const raced = this.live.get(call.spec.digest);
      if (raced !== undefined && this.backend(raced).name === call.settings.backend) {
        this.opts.hooks.link(call, raced);
        return raced;
      }
      const { store } = this.opts;
      let known = store.sandboxes.get(call.spec.digest);
      if (known !== undefined && known.backend !== call.settings.backend) {
        // The config (or a task override) moved this identity to another backend: the old ref
        // means nothing to the new backend (a local dir is no container id).
        await this.retireForeign(known, raced);
        known = undefined;
      }
      const backend = await this.backendFor(call);
      const { claim, sandbox, warm } = known === undefined && this.mayBeWarm(call)
        ? await this.fromWarmPool(call, backend)
        // The claim is made inside the gate: a claim's age tells other processes whether its maker
        // died, so it must not age in a queue.
        : await this.opts.gate.run(async () => {
          const c = await claimOrAwait(store, this.processToken, call, backend.name, known, this.limitsOf(call));
          this.assertMountFits(call, c.record);
          return { claim: c, sandbox: await this.ensureClaimed(call, backend, c), warm: undefined };
        });
      const pending = claim.record;
      const now = Date.now();
      const record: SandboxRecord = {
        ...pending, ref: sandbox.ref, name: sandbox.name, hostDir: sandbox.hostDir ?? null, lastUsedMs: now,
      };
      store.sandboxes.put(record);
      warm?.recorded();
      const live: LiveSandbox = {
        digest: call.spec.digest, sandbox, record, traits: call.traits, idleMs: call.settings.lifecycle.idleSeconds * 1000,
        inflight: 0, lastActivityMs: now, recreatedUnreported: sandbox.recreated, sessions: new Map(), diskCheckedMs: 0,
        shells: new SandboxShells(sandbox, {
          mayKillAll: call.traits.ownsProcessTable,
          log: this.logger.child('berth:shell').with({ key: call.binding.sandboxKey, ref: sandbox.ref }),
          warden: warm?.warden, preattached: warm?.shell,
        }),
      };
      this.backendOf.set(live, backend);
      this.live.set(call.spec.digest, live);
      this.opts.hooks.link(call, live);
      return live;
    });
  }

  /** A new sandbox of `call` counts against its tenant's quota with what its backend lets it take. */
  private limitsOf(call: ResolvedCall): { quota: TenantQuota; reserves: ReturnType<typeof reservationOf> } {
    return { quota: this.quota, reserves: reservationOf(this.opts.config.backends.module(call.settings.backend), call.settings) };
  }

  /** The tenants' quota (berth top's per-tenant line). */
  get tenantQuota(): TenantQuota {
    return this.quota;
  }

  /** A job's sandbox if it still exists (live, or recorded and reattached); never creates one. */
  async existing(call: ResolvedCall | undefined, digest: string): Promise<Sandbox | undefined> {
    const live = this.live.get(digest);
    if (live !== undefined) return live.sandbox;
    const rec = this.opts.store.sandboxes.get(digest);
    if (rec === undefined || rec.ref === '' || call === undefined || call.settings.backend !== rec.backend) return undefined;
    const backend = await this.backends.get(rec.backend);
    if (call.traits.listsByLabel) {
      if (!(await backend.listManaged()).some((m) => m.ref === rec.ref)) return undefined;
    } else if (rec.hostDir === null || !existsSync(rec.hostDir)) {
      return undefined;
    }
    return (await this.acquire(call)).sandbox;
  }

  /** Drops a live sandbox from memory (its shells are closed), e.g. after it vanished. */
  async forget(live: LiveSandbox): Promise<void> {
    await live.shells.close();
    if (this.live.get(live.digest) === live) this.live.delete(live.digest);
  }

  /** Removes a sandbox (after closing its shells) and its record. */
  async remove(rec: SandboxRecord): Promise<void> {
    await this.locks.run(`sandbox:${rec.digest}`, async () => {
      const live = this.live.get(rec.digest);
      // A container takes its jobs with it; a host dir does not, so end them first.
      if (live !== undefined && !live.traits.jobsDieWithSandbox) await this.opts.hooks.endJobs(rec.digest, live.sandbox).catch((e) => this.log('berth:jobs', String(e)));
      if (live) await this.forget(live);
      if (rec.ref !== '') {
        const backend = await this.backends.get(rec.backend);
        await backend.remove(rec.ref, rec.hostDir ?? undefined);
        this.removedOn.add(rec.backend);
      }
      this.opts.store.sandboxes.delete(rec.digest);
    });
  }

  /** Stops a persistent sandbox that went idle (forgotten first; the next call starts it again). */
  async stopIdle(live: LiveSandbox): Promise<void> {
    await this.forget(live);
    await this.backend(live).stop(live.record.ref).catch((e) => this.log('berth:reaper', `stop ${live.record.key}: ${String(e)}`));
  }

  /** After a failed call: whether the engine still has the sandbox's container, and running. */
  async outOfBandState(live: LiveSandbox): Promise<'gone' | 'stopped' | undefined> {
    if (!live.traits.listsByLabel) return undefined;
    const backend = this.backend(live);
    try {
      const found = (await backend.listManaged()).find((m) => m.ref === live.sandbox.ref);
      if (found === undefined) return 'gone';
      return found.running ? undefined : 'stopped';
    } catch {
      return undefined; // the engine itself is unreachable: report the original error
    }
  }

  /**
   * The line for a call that found its sandbox stopped (its main process ended: a command ended
   * it, or someone stopped it) and starts it again: what the start took with it.
   */
  startedAgainNotice(call: ResolvedCall, live: LiveSandbox): string {
    const notice = `berth: sandbox "${call.binding.sandboxKey}" had stopped (its main process ended, or it was stopped from outside), ` +
      `so it was started again: every process in it had ended${emptiedDirs(live)}\n`;
    this.log('berth:broker', notice.trim());
    return notice;
  }

  /** After a shell could not start in a container: its pid count when (nearly) every pid is taken. */
  async outOfProcesses(live: LiveSandbox): Promise<{ current: number; limit: number } | undefined> {
    if (!live.traits.ownsProcessTable) return undefined;
    const count = await live.sandbox.processCount?.();
    return count !== undefined && count.current >= count.limit - PIDS_HEADROOM ? count : undefined;
  }

  /**
   * The last resort when not even the warden could end what took every pid of a container (a
   * bomb that killed the warden, or one an earlier process left): restart it (the next call
   * starts it again). Returns the line that says so.
   */
  async restart(call: ResolvedCall, live: LiveSandbox, full: { current: number; limit: number }): Promise<string> {
    const notice = `berth: no new process could start in sandbox "${call.binding.sandboxKey}" (${full.current} of ${full.limit} pids in use), ` +
      `so it was restarted: every process in it was killed${emptiedDirs(live)}\n`;
    this.log('berth:broker', notice.trim());
    await this.forget(live);
    await this.backend(live).stop(live.sandbox.ref);
    return notice;
  }

  /**
   * The disk bound (docker.diskMb): measures the sandboxes used since their last check, one at a
   * time, least recently checked first, for at most DISK_CHECK_BUDGET_MS per pass (the rest are
   * still due next pass), and stops any over its bound; its next call fails with
   * `disk_limit_exceeded`. Runs in the periodic sweep; returns the keys of the sandboxes it stopped.
   */
  async enforceDiskLimits(): Promise<string[]> {
    const stopped: string[] = [];
    const deadline = Date.now() + DISK_CHECK_BUDGET_MS;
    for (const live of [...this.live.values()].sort((a, b) => a.diskCheckedMs - b.diskCheckedMs)) {
      if (this.opts.shutdown.aborted || Date.now() > deadline) break;
      const backend = this.backend(live);
      if (backend.checkDiskLimit === undefined || !(await this.usedSinceDiskCheck(live))) continue;
      const checkedMs = Date.now();
      const breach = await backend.checkDiskLimit(live.sandbox)
        .catch((e: unknown) => void this.log('berth:reaper', `measure disk of ${live.record.key}: ${String(e)}`));
      live.diskCheckedMs = checkedMs;
      if (!breach) continue;
      this.log('berth:reaper', breach.message);
      // Marked before the stop, so a command it cuts short reports this error, not a dead shell.
      live.diskBreach = breach;
      await backend.stop(live.sandbox.ref).catch((e: unknown) => this.log('berth:reaper', `stop ${live.record.key}: ${String(e)}`));
      await this.forget(live);
      stopped.push(live.record.key);
    }
    return stopped;
  }

  /**
   * The backends this installation may have sandboxes on, by name (or just `only`): those in
   * use, those the config names and those the store records (a fresh process has created none
   * yet, but its orphans are there).
   */
  async engines(only?: readonly string[]): Promise<string[]> {
    if (only !== undefined) return [...only];
    const { config, store } = this.opts;
    const names = new Set<string>([config.base.backend, ...Object.values(config.profiles).map((p) => p.backend)]);
    for (const rec of store.sandboxes.list()) names.add(rec.backend);
    const out = (await this.backends.created()).map((b) => b.name);
    for (const name of names) {
      if (out.includes(name)) continue;
      try {
        await this.backends.get(name);
        out.push(name);
      } catch {
        // A backend that cannot be created (not built yet) has no sandboxes to list.
      }
    }
    return out;
  }

  /** This installation's sandboxes as an engine sees them. */
  async listManaged(engine: string): Promise<ManagedSandbox[]> {
    if (!this.opts.config.backends.traits(engine).listsByLabel) return [];
    return (await this.backends.get(engine)).listManaged();
  }

  /**
   * The unclaimed warm-pool sandboxes the engines hold for this installation (of every broker),
   * with the memory each uses now where its engine can tell (`berth ls`).
   */
  async pooled(): Promise<PooledSandbox[]> {
    const out: PooledSandbox[] = [];
    const claimed = new Set(this.opts.store.sandboxes.list().map((r) => `${r.backend}\0${r.ref}`));
    for (const engine of await this.engines()) {
      const found = (await this.listManaged(engine)).filter((m) => m.pool !== undefined && !claimed.has(`${engine}\0${m.ref}`));
      if (found.length === 0) continue;
      const usage = await (await this.backends.get(engine)).usage?.(found.map((m) => m.ref)).catch(() => undefined);
      for (const m of found) {
        out.push({ backend: engine, ref: m.ref, name: m.name, shape: m.pool!.shape, owner: m.pool!.owner, running: m.running, memoryBytes: usage?.get(m.ref)?.memoryBytes });
      }
    }
    return out;
  }

  /** Removes a sandbox the engine has and the store does not want (an orphan); its record is the caller's. */
  async removeManaged(engine: string, ref: string): Promise<void> {
    await (await this.backends.get(engine)).remove(ref, undefined);
    this.removedOn.add(engine);
  }

  /** Removes the engine's objects of this installation that no sandbox uses any more (networks). */
  async reapIdleNetworks(engine: string): Promise<void> {
    await (await this.backends.get(engine)).reapIdleNetworks?.();
  }

  /** Takes down the host mounts of this installation's sandboxes that no sandbox uses any more (disk images). */
  async releaseIdleDisks(engine: string): Promise<void> {
    await (await this.backends.get(engine)).releaseIdleDisks?.();
  }

  /** Removes the engine's process groups that no process is in any more (see `Backend.reapIdleGroups`). */
  async reapIdleGroups(engine: string): Promise<void> {
    await (await this.backends.get(engine)).reapIdleGroups?.();
  }

  /**
   * `list` with state: reads each recorded backend once, then tells a record's state: `active`
   * (open in this process), else what its engine says, or `unknown` when it does not answer.
   */
  async stateReader(records: readonly SandboxRecord[]): Promise<(rec: SandboxRecord) => SandboxState> {
    const managed = new Map<string, ManagedSandbox[] | undefined>();
    const { backends: catalog } = this.opts.config;
    const listed = (name: string): boolean => catalog.has(name) && catalog.traits(name).listsByLabel;
    for (const name of new Set(records.map((r) => r.backend))) {
      const backend = await this.backends.get(name).catch(() => undefined);
      managed.set(name, backend !== undefined && listed(name) ? await backend.listManaged().catch(() => undefined) : []);
    }
    return (rec) => {
      if (this.live.has(rec.digest)) return 'active';
      const seen = managed.get(rec.backend);
      if (seen === undefined) return 'unknown';
      // A backend whose engine keeps no list: a sandbox with a host dir is there while its dir is.
      if (!listed(rec.backend)) return rec.hostDir === null ? 'unknown' : existsSync(rec.hostDir) ? 'stopped' : 'missing';
      const m = seen.find((x) => x.ref === rec.ref);
      return m === undefined ? 'missing' : m.running ? 'running' : 'stopped';
    };
  }

  /** What each recorded sandbox uses now, by digest, from the backends that can tell (`berth top`). */
  async usage(records: readonly SandboxRecord[]): Promise<Map<string, SandboxUsage>> {
    const out = new Map<string, SandboxUsage>();
    for (const name of new Set(records.map((r) => r.backend))) {
      const backend = await this.backends.get(name).catch(() => undefined);
      if (backend?.usage === undefined) continue;
      const mine = records.filter((r) => r.backend === name && r.ref !== '');
      const byRef = await backend.usage(mine.map((r) => r.ref)).catch(() => new Map<string, SandboxUsage>());
      for (const r of mine) {
        const u = byRef.get(r.ref);
        if (u !== undefined) out.set(r.digest, u);
      }
    }
    return out;
  }

  /**
   * Closes every shell, forgets every sandbox (they stay as they are), removes the engine objects
   * no sandbox uses any more on the backends where this process removed a sandbox (a tenant
   * network whose last sandbox went: otherwise it outlives an installation whose home is deleted,
   * as a container would) and releases the engines. Each request of that pass is bounded by
   * CLOSE_NETWORK_PASS_MS: an engine that stopped answering neither holds the shutdown nor keeps
   * the process alive.
   */
  async close(): Promise<void> {
    await this.warm.close().catch((e: unknown) => this.log('berth:pool', `warm pools at close: ${String(e)}`));
    for (const live of this.live.values()) await live.shells.close();
    this.live.clear();
    for (const name of this.removedOn) {
      const backend = await this.backends.get(name).catch(() => undefined);
      await backend?.reapIdleNetworks?.({ timeoutMs: CLOSE_NETWORK_PASS_MS }).catch((e: unknown) => this.log('berth:reaper', `networks at close: ${String(e)}`));
    }
    await this.backends.closeAll();
  }

  /** A call a warm pool may serve: a new ephemeral sandbox without a host mount, of a profile with a pool. */
  private mayBeWarm(call: ResolvedCall): boolean {
    return this.opts.warmPool === true && call.settings.warmPool.size > 0 && call.spec.ephemeral && call.spec.mount === null;
  }

  /**
   * The creation claim, then a sandbox from the warm pool when the claim is this process's; when
   * the pool cannot serve it (empty, the claim failed), a sandbox created the usual way on the
   * same backend. Outside the gate: a claim starts nothing (and a creation claim names its
   * process, so on a miss its wait in the gate's queue never makes it look abandoned).
   */
  private async fromWarmPool(call: ResolvedCall, backend: Backend): Promise<{ claim: Claim; sandbox: Sandbox; warm: WarmClaim | undefined }> {
    const { store } = this.opts;
    const claim = await claimOrAwait(store, this.processToken, call, backend.name, undefined, this.limitsOf(call));
    this.assertMountFits(call, claim.record);
    if (claim.mine) {
      let warm: WarmClaim | undefined;
      try {
        warm = await this.warm.claim(backend, call.settings, call.spec);
      } catch (err) {
        store.sandboxes.delete(call.spec.digest);
        throw err;
      }
      if (warm !== undefined) return { claim, sandbox: warm.sandbox, warm };
    }
    return { claim, sandbox: await this.opts.gate.run(() => this.ensureClaimed(call, backend, claim)), warm: undefined };
  }

  /** `ensure` under a creation claim; a failure drops the claim this process made. */
  private async ensureClaimed(call: ResolvedCall, backend: Backend, claim: Claim): Promise<Sandbox> {
    try {
      return await backend.ensure(call.spec, claim.mine ? undefined : claim.record.ref);
    } catch (err) {
      if (claim.mine) this.opts.store.sandboxes.delete(call.spec.digest);
      throw err;
    }
  }

  private backend(live: LiveSandbox): Backend {
    return this.backendOf.get(live) as Backend;
  }

  private async backendFor(call: ResolvedCall): Promise<Backend> {
    const backend = await this.backends.get(call.settings.backend);
    const module = this.opts.config.backends.module(call.settings.backend);
    const image = module.images === undefined ? '' : module.images.of(sectionOf(module, call.settings));
    const checkKey = `${call.settings.backend}:${call.scope.profile}:${image}`;
    if (!this.checkedKeys.has(checkKey)) {
      await backend.check(call.settings);
      this.checkedKeys.add(checkKey);
      await this.opts.hooks.checked(call.settings.backend);
    }
    return backend;
  }

  private assertMountFits(call: ResolvedCall, known: SandboxRecord): void {
    if (call.spec.mount !== null && known.mount !== call.spec.mount) {
      throw new PolicyRefusedError(
        `sandbox "${call.binding.sandboxKey}" already mounts ${known.mount ?? 'no workspace'} at /workspace, not ${call.spec.mount}; ` +
        'a mount is fixed when the sandbox is created: use the same workspace, or remove the sandbox first (berth rm with the same scope flags)');
    }
  }

  /**
   * Drops a sandbox recorded under another backend than the one its identity now resolves to.
   * An ephemeral one is removed (its sessions continue on the new backend); a persistent one's
   * files stay where that backend keeps them, found again by name if the config switches back.
   * Runs under the identity's lock.
   */
  private async retireForeign(rec: SandboxRecord, live: LiveSandbox | undefined): Promise<void> {
    this.log('berth:broker', `sandbox ${rec.key} moved from backend ${rec.backend}; retiring its old record`);
    if (live !== undefined) await this.forget(live);
    if (rec.ephemeral && rec.ref !== '') {
      try {
        const old = await this.backends.get(rec.backend);
        await old.remove(rec.ref, rec.hostDir ?? undefined);
        this.removedOn.add(rec.backend);
      } catch (e) {
        this.log('berth:broker', `remove ${rec.key} on ${rec.backend}: ${String(e)}`);
      }
    }
    this.opts.store.sandboxes.delete(rec.digest);
  }

  private async usedSinceDiskCheck(live: LiveSandbox): Promise<boolean> {
    if (live.inflight > 0 || live.lastActivityMs >= live.diskCheckedMs) return true;
    if (this.opts.store.jobs.runningIn(live.digest).length > 0) return true;
    return live.shells.hasBackgroundJobs();
  }
}

/** What a restart of `live`'s sandbox empties, for its notice (' and /tmp, … (tmpfs) were emptied', or nothing). */
function emptiedDirs(live: LiveSandbox): string {
  const dirs = live.sandbox.volatileDirs ?? [];
  return dirs.length > 0 ? ` and ${dirs.join(', ')} (tmpfs) were emptied` : '';
}
