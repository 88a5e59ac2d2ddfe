import type { Backend, Lease } from '../backends/backend.js';
import type { BackendCatalog } from '../backends/catalog.js';
import { sectionOf } from '../backends/module.js';
import type { ProfileSettings } from '../setup/berth-config.js';
import type { Logger } from '../logging/logger.js';

/**
 * The backends of one broker, each created on first use by its module's factory (so `explain`
 * and local-only configs never load an engine client).
 */
export class BackendRegistry {
  private readonly made = new Map<string, Promise<Backend>>();

  constructor(
    private readonly opts: {
      catalog: BackendCatalog;
      berthHome: string;
      installation: string;
      /** Backends given ready-made (tests), by name; the catalog still says what they are. */
      injected?: Readonly<Record<string, Backend | undefined>> | undefined;
      /** The broker's logger; each backend gets `berth:<name>`. */
      log: Logger;
      /** Serialises engine-object creation across this installation's processes. */
      lease: Lease;
      /** The config's merged places (top level, then profiles), handed to each backend. */
      profiles: readonly ProfileSettings[];
    },
  ) {}

  get(name: string): Promise<Backend> {
    let b = this.made.get(name);
    if (b === undefined) {
      b = this.create(name);
      this.made.set(name, b);
      b.catch(() => this.made.delete(name));
    }
    return b;
  }

  private async create(name: string): Promise<Backend> {
    const module = this.opts.catalog.module(name);
    const injected = this.opts.injected?.[name];
    if (injected !== undefined) return injected;
    const { berthHome, installation, lease, profiles } = this.opts;
    const places = profiles.filter((p) => p.backend === name).map((p) => sectionOf(module, p));
    return module.create({ berthHome, installation, lease, places, log: this.opts.log.child(`berth:${name}`) });
  }

  /** Backends created so far (for reapers and shutdown). */
  async created(): Promise<Backend[]> {
    const settled = await Promise.allSettled(this.made.values());
    return settled.flatMap((s) => (s.status === 'fulfilled' ? [s.value] : []));
  }

  async closeAll(): Promise<void> {
    for (const b of await this.created()) {
      try {
        await b.close();
      } catch {
        // Closing is best effort; an engine that is gone has nothing left to release.
      }
    }
  }
}
