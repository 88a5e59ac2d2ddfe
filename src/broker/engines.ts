import type { Backend, ManagedSandbox } from '../backends/backend.js';
import type { GuardStatus } from '../egress/host-guard.js';
import type { BerthConfig } from '../setup/berth-config.js';
import type { SandboxRecord } from './state/sandbox-table.js';

/** What the engines part asks of the broker's backends: each by name, created on first use, and those made so far. */
export interface BackendSource {
  get(name: string): Promise<Backend>;
  created(): Promise<Backend[]>;
}

/** What the engines part reads of the store: the sandboxes recorded, of every tenant. */
export interface RecordedSandboxes {
  list(): SandboxRecord[];
}

/**
 * The engines this installation may have sandboxes on, and what the reapers and the operator's
 * views ask of an engine as a whole: its list of this installation's sandboxes, and the removal
 * of its objects no sandbox uses any more (networks, disk mounts, process groups).
 */
export class Engines {
  constructor(private readonly opts: { config: BerthConfig; backends: BackendSource; sandboxes: RecordedSandboxes }) {}

  /**
   * The backends this installation may have sandboxes on, by name (or just `only`): those in
   * use, those the config names and those the store records (a fresh process has created none
   * yet, but its orphans are there).
   */
  async names(only?: readonly string[]): Promise<string[]> {
    if (only !== undefined) return [...only];
    const { config, backends, sandboxes } = this.opts;
    const names = new Set<string>([config.base.backend, ...Object.values(config.profiles).map((p) => p.backend)]);
    for (const rec of sandboxes.list()) names.add(rec.backend);
    const out = (await backends.created()).map((b) => b.name);
    for (const name of names) {
      if (out.includes(name)) continue;
      try {
        await backends.get(name);
        out.push(name);
      } catch {
        // A backend that cannot be created (not built yet) has no sandboxes to list.
      }
    }
    return out;
  }

  /** This installation's sandboxes as an engine sees them (none from an engine that keeps no list). */
  async listManaged(engine: string): Promise<ManagedSandbox[]> {
    if (!this.opts.config.backends.traits(engine).listsByLabel) return [];
    return (await this.opts.backends.get(engine)).listManaged();
  }

  /** Removes the engine's objects of this installation that no sandbox uses any more (networks). */
  async reapIdleNetworks(engine: string): Promise<void> {
    await (await this.opts.backends.get(engine)).reapIdleNetworks?.();
  }

  /** Takes down the host mounts of this installation's sandboxes that no sandbox uses any more (disk images). */
  async releaseIdleDisks(engine: string): Promise<void> {
    await (await this.opts.backends.get(engine)).releaseIdleDisks?.();
  }

  /** The engine's host guard now, repaired first with `repair` (see `Backend.hostGuard`); undefined where none applies. */
  async hostGuard(engine: string, repair: boolean): Promise<GuardStatus | undefined> {
    return (await this.opts.backends.get(engine)).hostGuard?.(repair);
  }

  /** Removes the engine's process groups that no process is in any more (see `Backend.reapIdleGroups`). */
  async reapIdleGroups(engine: string): Promise<void> {
    await (await this.opts.backends.get(engine)).reapIdleGroups?.();
  }
}
