import { existsSync } from 'node:fs';
import type { ManagedSandbox, SandboxUsage } from '../backends/backend.js';
import type { BerthConfig } from '../setup/berth-config.js';
import type { BackendByName } from './sandbox-removal.js';
import type { LiveSandbox, LiveSandboxes } from './live-sandboxes.js';
import type { SandboxRecord } from './state/sandbox-table.js';
import type { JobRecord } from './state/job-table.js';
import type { Logger } from '../logging/logger.js';
import type { StartGate } from './start-gate.js';

/** Time one disk-check pass may take (a measurement costs the engine a walk of the writable layer). */
const DISK_CHECK_BUDGET_MS = 10_000;

/**
 * `active`: open in this process; `running`; `hibernated`: stopped by berth with its files and
 * shells' state kept, resumed by the next call; `stopped`: stopped otherwise (the next call starts
 * it again); `missing`: its record is there, the sandbox is not; `unknown`: its engine did not answer.
 */
export type SandboxState = 'active' | 'running' | 'hibernated' | 'stopped' | 'missing' | 'unknown';

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

/** What the measures ask of the engines: which there are, and what each lists. */
export interface EngineLists {
  names(): Promise<string[]>;
  listManaged(engine: string): Promise<ManagedSandbox[]>;
}

export interface SandboxMeasuresOptions {
  config: BerthConfig;
  lives: Pick<LiveSandboxes, 'all' | 'get' | 'has' | 'backendOf' | 'forget'>;
  backends: BackendByName;
  engines: EngineLists;
  /** The sandboxes recorded, of every tenant. */
  sandboxes: { list(): SandboxRecord[] };
  /** Jobs recorded as running in a sandbox. */
  jobs: { runningIn(digest: string): JobRecord[] };
  /**
   * The start gate: a disk measure is an engine call (docker sizes the writable layer), taken
   * behind every start, so berth's engine calls at once stay within the gate's width.
   */
  gate: Pick<StartGate, 'runBackground'>;
  /** Set once the broker began to close: nothing is measured after that. */
  shutdown: AbortSignal;
  log: Logger;
}

/**
 * What sandboxes are and use, as their engines tell: each recorded sandbox's state, its memory and
 * disk use now, the unclaimed warm-pool sandboxes; and the disk bound, measured in the periodic
 * sweep and enforced by stopping a sandbox over it.
 */
export class SandboxMeasures {
  constructor(private readonly opts: SandboxMeasuresOptions) {}

  /**
   * The disk bound (docker.diskMb): measures the sandboxes used since their last check, one at a
   * time, least recently checked first, for at most DISK_CHECK_BUDGET_MS per pass (the rest are
   * still due next pass), and stops any over its bound; its next call fails with
   * `disk_limit_exceeded`. Runs in the periodic sweep; returns the keys of the sandboxes it stopped.
   */
  async enforceDiskLimits(): Promise<string[]> {
    const { lives, shutdown, log } = this.opts;
    const stopped: string[] = [];
    const deadline = Date.now() + DISK_CHECK_BUDGET_MS;
    for (const live of lives.all().sort((a, b) => a.diskCheckedMs - b.diskCheckedMs)) {
      if (shutdown.aborted || Date.now() > deadline) break;
      // One removed (or hibernated) since the pass began is not measured, nor is its failure news.
      const held = (): boolean => lives.get(live.digest) === live;
      if (!held()) continue;
      const backend = lives.backendOf(live);
      if (backend.checkDiskLimit === undefined || !(await this.usedSinceDiskCheck(live))) continue;
      const checkedMs = Date.now();
      const breach = await this.opts.gate.runBackground(() => backend.checkDiskLimit!(live.sandbox))
        .catch((e: unknown) => void (held() ? log.child('berth:reaper').warn(`measure disk of ${live.record.key}: ${String(e)}`) : undefined));
      live.diskCheckedMs = checkedMs;
      if (!breach) continue;
      log.child('berth:reaper').warn(breach.message);
      // Marked before the stop, so a command it cuts short reports this error, not a dead shell.
      live.diskBreach = breach;
      await backend.stop(live.sandbox.ref).catch((e: unknown) => log.child('berth:reaper').warn(`stop ${live.record.key}: ${String(e)}`));
      await lives.forget(live);
      stopped.push(live.record.key);
    }
    return stopped;
  }

  /**
   * Reads each recorded backend once, then tells a record's state: `active` (open in this
   * process), else what its engine says, or `unknown` when it does not answer.
   */
  async stateReader(records: readonly SandboxRecord[]): Promise<(rec: SandboxRecord) => SandboxState> {
    const managed = new Map<string, ManagedSandbox[] | undefined>();
    const { backends: catalog } = this.opts.config;
    const listed = (name: string): boolean => catalog.has(name) && catalog.traits(name).listsByLabel;
    for (const name of new Set(records.map((r) => r.backend))) {
      const backend = await this.opts.backends.get(name).catch(() => undefined);
      managed.set(name, backend !== undefined && listed(name) ? await backend.listManaged().catch(() => undefined) : []);
    }
    return (rec) => {
      if (this.opts.lives.has(rec.digest)) return 'active';
      const seen = managed.get(rec.backend);
      if (seen === undefined) return 'unknown';
      // A backend whose engine keeps no list: a sandbox with a host dir is there while its dir is.
      const down = (rec.hibernatedMs ?? null) !== null ? 'hibernated' : 'stopped';
      if (!listed(rec.backend)) return rec.hostDir === null ? 'unknown' : existsSync(rec.hostDir) ? down : 'missing';
      const m = seen.find((x) => x.ref === rec.ref);
      return m === undefined ? 'missing' : m.running ? 'running' : down;
    };
  }

  /** What each recorded sandbox uses now, by digest, from the backends that can tell (`berth top`). */
  async usage(records: readonly SandboxRecord[]): Promise<Map<string, SandboxUsage>> {
    const out = new Map<string, SandboxUsage>();
    for (const name of new Set(records.map((r) => r.backend))) {
      const backend = await this.opts.backends.get(name).catch(() => undefined);
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
   * The unclaimed warm-pool sandboxes the engines hold for this installation (of every broker),
   * with the memory each uses now where its engine can tell (`berth ls`).
   */
  async pooled(): Promise<PooledSandbox[]> {
    const { engines, backends, sandboxes } = this.opts;
    const out: PooledSandbox[] = [];
    const claimed = new Set(sandboxes.list().map((r) => `${r.backend}\0${r.ref}`));
    for (const engine of await engines.names()) {
      const found = (await engines.listManaged(engine)).filter((m) => m.pool !== undefined && !claimed.has(`${engine}\0${m.ref}`));
      if (found.length === 0) continue;
      const usage = await (await backends.get(engine)).usage?.(found.map((m) => m.ref)).catch(() => undefined);
      for (const m of found) {
        out.push({ backend: engine, ref: m.ref, name: m.name, shape: m.pool!.shape, owner: m.pool!.owner, running: m.running, memoryBytes: usage?.get(m.ref)?.memoryBytes });
      }
    }
    return out;
  }

  private async usedSinceDiskCheck(live: LiveSandbox): Promise<boolean> {
    if (live.inflight > 0 || live.lastActivityMs >= live.diskCheckedMs) return true;
    if (this.opts.jobs.runningIn(live.digest).length > 0) return true;
    return live.shells.hasBackgroundJobs();
  }
}
