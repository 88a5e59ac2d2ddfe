import type { Backend, Lease } from '../backends/backend.js';
import { LocalBackend } from '../backends/local/local-backend.js';
import type { BackendName } from '../config/types.js';
import { BackendUnavailableError } from '../errors.js';

/** Creates backends on first use (so `explain` and local-only configs never load an engine client). */
export class BackendRegistry {
  private readonly made = new Map<BackendName, Promise<Backend>>();

  constructor(
    private readonly opts: {
      berthHome: string; installation: string; injected?: Partial<Record<BackendName, Backend>>; log: (msg: string) => void;
      /** Serialises engine-object creation across this installation's processes. */
      lease: Lease;
    },
  ) {}

  get(name: BackendName): Promise<Backend> {
    let b = this.made.get(name);
    if (b === undefined) {
      b = this.create(name);
      this.made.set(name, b);
      b.catch(() => this.made.delete(name));
    }
    return b;
  }

  private async create(name: BackendName): Promise<Backend> {
    const injected = this.opts.injected?.[name];
    if (injected !== undefined) return injected;
    switch (name) {
      case 'local':
        return new LocalBackend({ berthHome: this.opts.berthHome });
      case 'docker': {
        const { DockerBackend } = await import('../backends/docker/docker-backend.js');
        return new DockerBackend({ installation: this.opts.installation, berthHome: this.opts.berthHome, log: this.opts.log, lease: this.opts.lease });
      }
      case 'ssh':
        throw new BackendUnavailableError('backend "ssh" is not available yet in this version of berth; set backend: docker (or local for development) in the config');
    }
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
