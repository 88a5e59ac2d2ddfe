import { createHash, randomBytes } from 'node:crypto';
import { shellsDirOf } from '../shell/persistent-shell.js';
import { shellsDirCommand } from '../shell/protocol.js';
import type { Backend, PoolShape, Sandbox, SandboxSpec } from '../backends/backend.js';
import { sectionOf } from '../backends/module.js';
import type { ShellTransport } from '../shell/transport.js';
import type { BerthConfig, ProfileSettings } from '../setup/berth-config.js';
import { ConfigError } from '../errors.js';
import type { Logger } from '../logging/logger.js';
import { wardenFor, type Warden } from '../shell/warden.js';
import { ownerToken } from '../kit/process-owner.js';
import type { StartGate } from './start-gate.js';

/**
 * Per-tenant pools of one shape a broker keeps at most: each holds `warmPool.size` started
 * sandboxes, so a stream of new tenants must not grow them without end.
 */
const MAX_TENANT_POOLS = 16;

/**
 * A refill after a claim waits this long: making a sandbox takes the CPU (bwrap's namespaces, the
 * engine's create) that the claimed session's first shell start needs on a small machine.
 */
const REFILL_AFTER_CLAIM_MS = 300;

/** One prepared sandbox: started, with its warden running and a bash attached, owned by nobody. */
interface Entry {
  sandbox: Sandbox;
  warden: Warden;
  /** A bash opened with the sandbox's base environment only; its first claimant's env goes on its stdin. */
  shell: ShellTransport | undefined;
  /** Set when that bash ended: the sandbox stopped or was removed behind berth's back. */
  ended: boolean;
}

/** What a claim gives: the sandbox, now the identity's, with what was started in it ahead. */
export interface WarmClaim {
  sandbox: Sandbox;
  warden: Warden;
  shell: ShellTransport | undefined;
  /** Call once the store records the sandbox under its identity (until then the reapers leave it to this pool). */
  recorded(): void;
}

/** The backend, settings and size of one pool, and what it holds now. */
interface Pool {
  shape: PoolShape;
  backend: Backend;
  size: number;
  ready: Entry[];
  filling: number;
  /** The configured shape it is of (for a per-tenant pool, without the tenant). */
  base: string;
  /** Its last claim (or creation): the per-tenant pool least recently used goes first past the bound. */
  usedMs: number;
}

/** What `berth ls` and the metrics show of one pool. */
export interface WarmPoolView {
  backend: string;
  shape: string;
  tenant: string | undefined;
  /** The broker's pool label (`pid:starttime:nonce`). */
  owner: string;
  size: number;
  ready: number;
  refs: string[];
}

export interface WarmPoolOptions {
  config: BerthConfig;
  /** The broker's backends, by name (one instance per broker). */
  backends: { get(name: string): Promise<Backend> };
  /** Fills run through it behind every foreground start (`runBackground`). */
  gate: StartGate;
  /** Whether this broker keeps pools (a long-lived one); otherwise every call takes the usual path. */
  fill: boolean;
  /** Told of each claim: served from a pool (hit) or not (miss: empty, or the claim failed). */
  observer: { poolClaimed(o: { backend: string; hit: boolean }): void };
  log: Logger;
}

/**
 * The warm pools of one broker: per pool shape (and tenant, where the shape's network is the
 * tenant's), `warmPool.size` sandboxes created, started and with a bash attached before anyone
 * asks. A claim takes one out for good (it is never pooled again: removed with its session like
 * any ephemeral sandbox) and starts a refill in the background. Only the process that made a pool
 * sandbox claims it; its label names this broker, so reapers remove it once the broker is gone.
 */
export class WarmPool {
  /** This broker's pool label (`pid:starttime:nonce`): two brokers in one process keep their own pools. */
  readonly owner = `${ownerToken()}:${randomBytes(4).toString('hex')}`;
  private readonly pools = new Map<string, Pool>();
  /**
   * The shapes of the profiles that ask for a pool (set at `start`). Only these are pooled: a
   * call of another shape (a task's own image, say) never makes a pool, so no caller can make
   * berth keep sandboxes of its choosing.
   */
  private readonly configured = new Set<string>();
  /** Refs taken out of a pool whose store record is not written yet. */
  private readonly claiming = new Set<string>();
  /** Fills and removals under way (close waits for them). */
  private readonly pending = new Set<Promise<void>>();
  private closed = false;

  constructor(private readonly opts: WarmPoolOptions) {}

  /**
   * Start-up of a long-lived broker: every profile asking for a pool has a backend that can keep
   * one and settings it can pool (else a `ConfigError` naming the profile, backend and fix); the
   * pools whose sandboxes belong to no tenant start filling now, the per-tenant ones at a
   * tenant's first call. Returns the backends that keep pools.
   */
  async start(): Promise<string[]> {
    if (!this.opts.fill) return [];
    const engines = new Set<string>();
    for (const [profile, settings] of this.profiles()) {
      const backend = await this.opts.backends.get(settings.backend);
      const section = sectionOf(this.opts.config.backends.module(settings.backend), settings);
      const shape = this.shapeOf(profile, section, backend);
      this.configured.add(`${backend.name}\0${shape.digest}`);
      engines.add(backend.name);
      if (!shape.perTenant) this.poolFor(backend, settings, section, shape.digest, undefined);
    }
    return [...engines];
  }

  /**
   * A started sandbox for a new ephemeral sandbox without a host mount of `settings` (the call's,
   * its profile's pool size), claimed for `spec`'s identity; undefined when the call does not
   * come from a pool, the pool is empty or the claim failed (the caller creates one the usual way
   * on the same backend). Runs under the identity's lock.
   */
  async claim(
    backend: Backend, settings: ProfileSettings, spec: SandboxSpec,
  ): Promise<WarmClaim | undefined> {
    if (!this.opts.fill || this.closed || settings.warmPool.size === 0 || !spec.ephemeral || spec.mount !== null || backend.warm === undefined) return undefined;
    const shaped = backend.warm.shapeOf(spec.section);
    if ('unpoolable' in shaped || !this.configured.has(`${backend.name}\0${shaped.digest}`)) return undefined;
    const pool = this.poolFor(backend, settings, spec.section, shaped.digest, shaped.perTenant ? spec.identity.tenant : undefined);
    const entry = this.takeLive(pool);
    this.refill(pool, REFILL_AFTER_CLAIM_MS);
    if (entry === undefined) {
      this.opts.observer.poolClaimed({ backend: backend.name, hit: false });
      return undefined;
    }
    const ref = entry.sandbox.ref;
    this.claiming.add(ref);
    try {
      const sandbox = await backend.warm.claim(entry.sandbox, spec);
      this.opts.observer.poolClaimed({ backend: backend.name, hit: true });
      return { sandbox, warden: entry.warden, shell: entry.shell, recorded: () => this.claiming.delete(ref) };
    } catch (err) {
      this.claiming.delete(ref);
      this.opts.log.with({ ref }).debug(`warm-pool claim failed, creating one instead: ${String(err)}`);
      await this.discard(pool.backend, entry);
      this.opts.observer.poolClaimed({ backend: backend.name, hit: false });
      return undefined;
    }
  }

  /**
   * Whether an unclaimed pool sandbox labelled with this broker is one it still keeps (the
   * reapers ask): ready, being claimed, or possibly the one a fill of its pool is making now. A
   * shape this broker has no pool of (a stale one) is not kept.
   */
  keeps(ref: string, shape: string): boolean {
    if (this.claiming.has(ref)) return true;
    const pool = this.pools.get(shape);
    return pool !== undefined && (pool.filling > 0 || pool.ready.some((e) => e.sandbox.ref === ref));
  }

  /** The pools and what they hold now. */
  view(): WarmPoolView[] {
    return [...this.pools.values()].map((p) => ({
      backend: p.backend.name, shape: p.shape.digest, tenant: p.shape.tenant, owner: this.owner, size: p.size, ready: p.ready.length, refs: p.ready.map((e) => e.sandbox.ref),
    }));
  }

  /** Waits for the fills under way (tests, the bench). */
  async settled(): Promise<void> {
    while (this.pending.size > 0) await Promise.all([...this.pending]);
  }

  /** Stops filling and removes every unclaimed sandbox (those being made too, once made). */
  async close(): Promise<void> {
    this.closed = true;
    await this.settled();
    for (const pool of this.pools.values()) {
      const entries = pool.ready.splice(0);
      for (const e of entries) await this.discard(pool.backend, e);
    }
  }

  /** The next ready entry whose bash still runs; the others (their sandbox went) are removed in the background. */
  private takeLive(pool: Pool): Entry | undefined {
    for (let e = pool.ready.shift(); e !== undefined; e = pool.ready.shift()) {
      if (!e.ended) return e;
      this.track(this.discard(pool.backend, e));
    }
    return undefined;
  }

  private *profiles(): Iterable<[string, ProfileSettings]> {
    const { config } = this.opts;
    if (config.base.warmPool.size > 0) yield ['warmPool', config.base];
    for (const [name, s] of Object.entries(config.profiles)) if (s.warmPool.size > 0) yield [`profiles.${name}.warmPool`, s];
  }

  /** `key`: where the config asks for the pool (`warmPool`, `profiles.bot.warmPool`), for the messages. */
  private shapeOf(key: string, section: unknown, backend: Backend): { digest: string; perTenant: boolean } {
    if (backend.warm === undefined) {
      throw new ConfigError(`config key "${key}": backend "${backend.name}" cannot keep a warm pool; set warmPool.size: 0 for that profile, or use a backend that has one (docker, bwrap)`);
    }
    const shaped = backend.warm.shapeOf(section);
    if ('unpoolable' in shaped) throw new ConfigError(`config key "${key}": ${shaped.unpoolable}`);
    return shaped;
  }

  /** `settings`: a place that asks for the pool; `section`: its backend's section, which its sandboxes are made from. */
  private poolFor(backend: Backend, settings: ProfileSettings, section: unknown, shape: string, tenant: string | undefined): Pool {
    const digest = tenant === undefined ? shape : createHash('sha256').update(`${shape}\0${tenant}`).digest('hex');
    let pool = this.pools.get(digest);
    if (pool === undefined) {
      if (tenant !== undefined) this.boundTenantPools(shape);
      pool = { shape: { digest, section, tenant, owner: this.owner }, backend, size: 0, ready: [], filling: 0, base: shape, usedMs: Date.now() };
      this.pools.set(digest, pool);
    }
    pool.usedMs = Date.now();
    // Profiles of one shape share its pool, at the largest size any of them asks.
    pool.size = Math.max(pool.size, settings.warmPool.size);
    this.refill(pool);
    return pool;
  }

  /** Before a new per-tenant pool of `shape`: past MAX_TENANT_POOLS, the least recently used one is dropped. */
  private boundTenantPools(shape: string): void {
    const ofShape = [...this.pools.values()].filter((p) => p.base === shape && p.shape.tenant !== undefined);
    if (ofShape.length < MAX_TENANT_POOLS) return;
    const oldest = ofShape.reduce((a, b) => (b.usedMs < a.usedMs ? b : a));
    this.pools.delete(oldest.shape.digest);
    for (const e of oldest.ready.splice(0)) this.track(this.discard(oldest.backend, e));
  }

  /** `delayMs`: wait that long first (after a claim, so the refill does not compete with the claimed session's start for the CPU). */
  private refill(pool: Pool, delayMs = 0): void {
    while (!this.closed && pool.ready.length + pool.filling < pool.size) {
      pool.filling += 1;
      const waited = delayMs === 0 ? Promise.resolve() : new Promise<void>((resolve) => setTimeout(resolve, delayMs));
      this.track(waited.then(() => this.opts.gate.runBackground(() => this.prepare(pool)))
        .then((entry) => {
          if (entry === undefined) return;
          // A pool dropped meanwhile (past the tenant bound) keeps nothing.
          if (this.pools.get(pool.shape.digest) === pool) pool.ready.push(entry);
          else this.track(this.discard(pool.backend, entry));
        })
        .finally(() => {
          pool.filling -= 1;
        }));
    }
  }

  private track(p: Promise<void>): void {
    const tracked = p.catch((err: unknown) => this.opts.log.debug(`warm pool: ${String(err)}`)).finally(() => this.pending.delete(tracked));
    this.pending.add(tracked);
  }

  /** One sandbox of the pool, its warden started and a bash attached; undefined when that failed (logged). */
  private async prepare(pool: Pool): Promise<Entry | undefined> {
    if (this.closed) return undefined;
    const { backend } = pool;
    let sandbox: Sandbox;
    try {
      sandbox = await backend.warm!.prepare(pool.shape);
    } catch (err) {
      this.opts.log.debug(`warm pool ${pool.shape.digest.slice(0, 12)}: could not prepare a sandbox: ${String(err)}`);
      return undefined;
    }
    // The warden may end every process of a sandbox whose backend owns its process table (a container).
    const mayKillAll = this.opts.config.backends.traits(backend.name).ownsProcessTable;
    const warden = wardenFor(sandbox, { mayKillAll, log: this.opts.log.with({ ref: sandbox.ref }) });
    await warden.start();
    const shell = await sandbox.openShell({ env: {}, cwd: sandbox.defaultCwd }).catch(() => undefined);
    // The shells' state dir is made now, by the bash that will be the session's (as its user):
    // the init finds it and forks nothing for it at claim time.
    shell?.stdin.write(`${shellsDirCommand(shellsDirOf(sandbox.stateDir))}\n`);
    const entry: Entry = { sandbox, warden, shell, ended: false };
    // A bash's end is the free sign that its sandbox stopped or was removed: a claim skips it.
    void shell?.exited.then(() => (entry.ended = true), () => (entry.ended = true));
    // Closed while it was made: it goes at once (close waits for this fill).
    if (this.closed) {
      await this.discard(backend, entry);
      return undefined;
    }
    return entry;
  }

  private async discard(backend: Backend, e: Entry): Promise<void> {
    await e.warden.close();
    await e.shell?.kill();
    await backend.remove(e.sandbox.ref, e.sandbox.hostDir).catch((err: unknown) => this.opts.log.debug(`remove pool sandbox ${e.sandbox.ref}: ${String(err)}`));
  }
}
