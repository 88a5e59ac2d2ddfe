import type { Backend, Sandbox } from '../backends/backend.js';
import type { BackendTraits } from '../config/backend-traits.js';
import type { BerthError } from '../errors.js';
import { KeyedLock } from '../kit/keyed-lock.js';
import type { SandboxShells } from './shell-pool.js';
import type { SandboxRecord } from './state/sandbox-table.js';
import { STAMP_AHEAD_MS } from './state/write-queue.js';

/** A sandbox this process holds, with what its calls, shells and reapers track about it. */
export interface LiveSandbox {
  readonly digest: string;
  readonly sandbox: Sandbox;
  readonly record: SandboxRecord;
  /** What its backend does (its processes die with it, its engine lists it, ...). */
  readonly traits: Readonly<BackendTraits>;
  /** An ephemeral sandbox idle this long is removed. */
  readonly idleMs: number;
  /** A persistent sandbox idle this long is hibernated; 0: never. */
  readonly hibernateMs: number;
  /** Calls running on it now (counted by `LiveSandboxes.enter` and `leave`). */
  inflight: number;
  lastActivityMs: number;
  /** The backend recreated a sandbox removed out of band; the next result says so. */
  recreatedUnreported: boolean;
  /** It was brought up from hibernation (when it was hibernated); the next result says so. */
  resumedUnreported: { hibernatedMs: number } | undefined;
  /** Its persistent shells and its warden. */
  readonly shells: SandboxShells;
  /** Sessions linked to this sandbox by this process, with when `last_seen` was last written. */
  readonly sessions: Map<string, number>;
  /** When its disk use was last measured (0: never). */
  diskCheckedMs: number;
  /** Set when it went over its disk bound: calls in flight on it end with this error. */
  diskBreach?: BerthError;
}

/**
 * Whether anything runs on `live` now: a call in flight, a busy shell, or a background job that
 * runs (a job whose state cannot be read counts as running).
 */
export async function inUseNow(live: LiveSandbox, jobs: { activeIn(digest: string, sandbox: Sandbox): Promise<boolean> }): Promise<boolean> {
  if (live.inflight > 0 || (await live.shells.busy())) return true;
  return jobs.activeIn(live.digest, live.sandbox).catch(() => true);
}

/**
 * The sandboxes this process holds, by identity digest, with the backend of each; the identity's
 * lock under which one is brought up or taken down; and the calls in flight on them, so a close
 * can wait until none is left.
 */
export class LiveSandboxes {
  private readonly live = new Map<string, LiveSandbox>();
  /** The backend of each live sandbox: kept here, so nothing outside the broker's sandbox parts calls it. */
  private readonly backends = new WeakMap<LiveSandbox, Backend>();
  private readonly locks = new KeyedLock();
  private inflight = 0;
  private drainedWaiters: Array<() => void> = [];

  /** `released` is told of each sandbox this process lets go of (the store's hold on it ends). */
  constructor(private readonly released: (digest: string) => void = () => undefined) {}

  get(digest: string): LiveSandbox | undefined {
    return this.live.get(digest);
  }

  has(digest: string): boolean {
    return this.live.has(digest);
  }

  all(): LiveSandbox[] {
    return [...this.live.values()];
  }

  /** Holds `live` (brought up on `backend`) as its identity's sandbox. */
  add(live: LiveSandbox, backend: Backend): void {
    this.backends.set(live, backend);
    this.live.set(live.digest, live);
  }

  backendOf(live: LiveSandbox): Backend {
    return this.backends.get(live) as Backend;
  }

  /** Runs `fn` under the lock of the identity `digest`: one bring-up or take-down of it at a time. */
  underLock<T>(digest: string, fn: () => Promise<T>): Promise<T> {
    return this.locks.run(`sandbox:${digest}`, fn);
  }

  /** Drops a live sandbox from memory (its shells are closed), e.g. after it vanished. */
  async forget(live: LiveSandbox): Promise<void> {
    await live.shells.close();
    if (this.live.get(live.digest) === live) {
      this.live.delete(live.digest);
      this.released(live.digest);
    }
  }

  /** A call begins on `live`: it is busy until the matching `leave`. */
  enter(live: LiveSandbox): void {
    live.inflight++;
    live.lastActivityMs = Date.now();
    this.inflight++;
  }

  leave(live: LiveSandbox): void {
    live.inflight--;
    live.lastActivityMs = Date.now();
    if (--this.inflight === 0) for (const wake of this.drainedWaiters.splice(0)) wake();
  }

  /**
   * Sets to `nowMs` the last activity of the sandboxes stamped more than STAMP_AHEAD_MS ahead of it
   * (before the wall clock stepped back), as the store's `stampsBack` does for its rows: else they
   * would not go idle until the clock caught up. Which sandboxes it set.
   */
  stampsBack(nowMs: number): LiveSandbox[] {
    const ahead = this.all().filter((live) => live.lastActivityMs > nowMs + STAMP_AHEAD_MS);
    for (const live of ahead) live.lastActivityMs = nowMs;
    return ahead;
  }

  /** Resolves once no call is in flight on any sandbox of this process (at once when none is). */
  drained(): Promise<void> {
    if (this.inflight === 0) return Promise.resolve();
    return new Promise((resolve) => this.drainedWaiters.push(resolve));
  }

  /**
   * Closes every shell and forgets every sandbox (they stay as they are). A shell that fails to
   * close does not keep the others open: each is tried, then the first failure is thrown.
   */
  async closeAll(): Promise<void> {
    const failures: unknown[] = [];
    for (const live of this.live.values()) await live.shells.close().catch((err: unknown) => void failures.push(err));
    for (const digest of this.live.keys()) this.released(digest);
    this.live.clear();
    if (failures.length > 0) throw failures[0];
  }
}
