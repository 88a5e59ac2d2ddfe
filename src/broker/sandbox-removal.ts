import type { Backend, Sandbox } from '../backends/backend.js';
import type { LiveSandbox, LiveSandboxes } from './live-sandboxes.js';
import type { SandboxHolders } from './sandbox-holders.js';
import type { SandboxRecord } from './state/sandbox-table.js';
import type { Logger } from '../logging/logger.js';

/** Bound of each engine request of the close pass that removes networks no sandbox uses. */
const CLOSE_NETWORK_PASS_MS = 5_000;

/** What removal asks of the jobs: end those of a sandbox whose processes outlive it (a host dir). */
export interface JobsEnder {
  killAllIn(digest: string, sandbox: Sandbox): Promise<void>;
}

/** What removal asks of the broker's backends: each by name, created on first use. */
export interface BackendByName {
  get(name: string): Promise<Backend>;
}

/** What removal changes in the store: a sandbox's record goes with it, or says it hibernates. */
export interface SandboxRecords {
  delete(digest: string): void;
  markHibernated(digest: string, ref: string, nowMs: number): boolean;
}

export interface SandboxRemovalOptions {
  lives: Pick<LiveSandboxes, 'get' | 'backendOf' | 'forget' | 'underLock'>;
  backends: BackendByName;
  sandboxes: SandboxRecords;
  /** Another live berth process holding a sandbox: then it is not hibernated. */
  holders: Pick<SandboxHolders, 'other'>;
  jobs: JobsEnder;
  /** The egress proxy's listener of a sandbox goes with it. */
  egress: { detach(ref: string): Promise<void> };
  log: Logger;
}

/**
 * Takes sandboxes down: removes one with its record (under the identity's lock), removes one an
 * engine has and the store does not want, retires one recorded under a backend its identity no
 * longer resolves to, hibernates an idle persistent one; and, at close, removes the engine objects
 * left unused on the backends where this process removed a sandbox.
 */
export class SandboxRemoval {
  /** Backends on which this process removed a sandbox: the close pass looks for what it left idle there. */
  private readonly removedOn = new Set<string>();

  constructor(private readonly opts: SandboxRemovalOptions) {}

  /** Removes a sandbox (after closing its shells) and its record. */
  async remove(rec: SandboxRecord): Promise<void> {
    const { lives, backends, sandboxes, jobs, log } = this.opts;
    await lives.underLock(rec.digest, async () => {
      const live = lives.get(rec.digest);
      // A container takes its jobs with it; a host dir does not, so end them first.
      if (live !== undefined && !live.traits.jobsDieWithSandbox) await jobs.killAllIn(rec.digest, live.sandbox).catch((e) => log.child('berth:jobs').warn(String(e)));
      if (live) await lives.forget(live);
      if (rec.ref !== '') {
        await this.opts.egress.detach(rec.ref);
        const backend = await backends.get(rec.backend);
        await backend.remove(rec.ref, rec.hostDir ?? undefined);
        this.removedOn.add(rec.backend);
      }
      sandboxes.delete(rec.digest);
    });
  }

  /** Removes a sandbox the engine has and the store does not want (an orphan); its record is the caller's. */
  async removeManaged(engine: string, ref: string): Promise<void> {
    await (await this.opts.backends.get(engine)).remove(ref, undefined);
    this.removedOn.add(engine);
  }

  /**
   * Drops a sandbox recorded under another backend than the one its identity now resolves to.
   * An ephemeral one is removed (its sessions continue on the new backend); a persistent one's
   * files stay where that backend keeps them, found again by name if the config switches back.
   * Runs under the identity's lock.
   */
  async retire(rec: SandboxRecord, live: LiveSandbox | undefined): Promise<void> {
    const { lives, backends, sandboxes, log } = this.opts;
    log.child('berth:broker').info(`sandbox ${rec.key} moved from backend ${rec.backend}; retiring its old record`);
    if (live !== undefined) await lives.forget(live);
    if (rec.ref !== '') await this.opts.egress.detach(rec.ref);
    if (rec.ephemeral && rec.ref !== '') {
      try {
        const old = await backends.get(rec.backend);
        await old.remove(rec.ref, rec.hostDir ?? undefined);
        this.removedOn.add(rec.backend);
      } catch (e) {
        log.child('berth:broker').warn(`remove ${rec.key} on ${rec.backend}: ${String(e)}`);
      }
    }
    sandboxes.delete(rec.digest);
  }

  /**
   * Hibernates a persistent sandbox that went idle, under its identity's lock: unless a call
   * began on it meanwhile (`stillIdle` is asked again under the lock), its shells save their state
   * and end, its processes stop and its engine resources go; its files stay, and the next call
   * resumes it. One that another live berth process holds is left alone: idle here, it may be
   * running a command there. True when it was hibernated.
   */
  async hibernate(live: LiveSandbox, stillIdle: () => Promise<boolean>): Promise<boolean> {
    const { lives, log } = this.opts;
    return lives.underLock(live.digest, async () => {
      if (lives.get(live.digest) !== live || !(await stillIdle())) return false;
      if (this.opts.holders.other(live.digest) !== undefined) return false;
      // Closing a shell dumps its state into the sandbox's state dir, which a stop keeps.
      await lives.forget(live);
      await this.opts.egress.detach(live.record.ref);
      try {
        await lives.backendOf(live).stop(live.record.ref);
      } catch (e) {
        // Its shells are closed already: the next call starts them again from their saved state.
        log.child('berth:reaper').warn(`hibernate ${live.record.key}: ${String(e)}`);
        return false;
      }
      return this.opts.sandboxes.markHibernated(live.digest, live.record.ref, Date.now());
    });
  }

  /**
   * Hibernates a persistent sandbox no process of this installation holds (the one that brought
   * it up ended: a CLI call, a berth that crashed), under its identity's lock, unless a process
   * brought it up meanwhile or one a command started (a job a CLI call left) still runs in it.
   */
  async hibernateUnheld(rec: SandboxRecord, stillUnheld: () => boolean): Promise<boolean> {
    const { lives, backends, log } = this.opts;
    return lives.underLock(rec.digest, async () => {
      if (lives.get(rec.digest) !== undefined || !stillUnheld() || this.opts.holders.other(rec.digest) !== undefined) return false;
      try {
        const backend = await backends.get(rec.backend);
        // A job a CLI call left running there (`cmd &`): no shell of any live process knows of it.
        if ((await backend.commandsRunning?.(rec.ref)) === true) {
          log.child('berth:reaper').debug(`sandbox ${rec.key}: a process a command started still runs in it; not hibernated`);
          return false;
        }
        await backend.stop(rec.ref);
      } catch (e) {
        log.child('berth:reaper').warn(`hibernate ${rec.key}: ${String(e)}`);
        return false;
      }
      return this.opts.sandboxes.markHibernated(rec.digest, rec.ref, Date.now());
    });
  }

  /**
   * The close pass: removes the engine objects no sandbox uses any more on the backends where this
   * process removed a sandbox (a tenant network whose last sandbox went: otherwise it outlives an
   * installation whose home is deleted, as a container would). Each request is bounded by
   * CLOSE_NETWORK_PASS_MS: an engine that stopped answering neither holds the shutdown nor keeps
   * the process alive.
   */
  async releaseUnusedAtClose(): Promise<void> {
    for (const name of this.removedOn) {
      const backend = await this.opts.backends.get(name).catch(() => undefined);
      await backend?.reapIdleNetworks?.({ timeoutMs: CLOSE_NETWORK_PASS_MS }).catch((e: unknown) => this.opts.log.child('berth:reaper').warn(`networks at close: ${String(e)}`));
    }
  }
}
