import { mkdirSync } from 'node:fs';
import { basename, join } from 'node:path';
import { Logger } from '../../logging/logger.js';
import type { Backend, ManagedSandbox, Sandbox, SandboxSpec } from '../backend.js';
import { HostCgroups } from '../cgroups/host-cgroups.js';
import type { SandboxCgroups } from '../cgroups/sandbox-cgroups.js';
import { removeUnder } from '../plumbing/remove-under.js';
import { LocalSandbox, LocalSandboxHandle } from './sandbox-handle.js';
import { localSandboxesRoot } from './paths.js';

/**
 * `backend: local` runs the shell on the host in a per-sandbox directory. It isolates NOTHING:
 * commands see the whole host filesystem as the user running berth. It exists for development and
 * for machines with no engine, and is used only when the config says `backend: local`.
 * What it does guarantee: the shell's environment is built only from grants (plus PATH, HOME, LANG,
 * TERM), never berth's whole environment.
 */
export class LocalBackend implements Backend<undefined> {
  readonly name = 'local' as const;
  private readonly root: string;
  private readonly log: Logger;
  /** Where its sandboxes' cgroups go, read at the first ensure (see backends/cgroups). */
  private cgroups: HostCgroups | { unavailable: string } | undefined;

  constructor(private readonly opts: { berthHome: string; installation?: string; log?: Logger }) {
    this.root = localSandboxesRoot(opts.berthHome);
    this.log = opts.log ?? Logger.silent();
  }

  async check(): Promise<void> {
    // Nothing to reach: the host is always there.
  }

  async ensure(spec: SandboxSpec, _knownRef: string | undefined): Promise<Sandbox> {
    const dir = join(this.root, spec.dirName);
    mkdirSync(join(dir, '.berth'), { recursive: true, mode: 0o700 });
    return new LocalSandbox(new LocalSandboxHandle(spec, dir, this.groupsOf(spec)));
  }

  /**
   * The sandbox's cgroup, where berth may make cgroups (as root): its shells start in it and each
   * command gets a group below it. A command that runs as root can still write its own pid
   * elsewhere in the hierarchy: on the host nothing is isolated, this only ends what does not try.
   */
  private groupsOf(spec: SandboxSpec): SandboxCgroups | undefined {
    if (this.opts.installation === undefined) return undefined;
    if (this.cgroups === undefined) {
      this.cgroups = HostCgroups.probe(this.opts.installation, this.log);
      if (this.cgroups instanceof HostCgroups) this.cgroups.reap();
      else this.log.debug(`commands are found by tags, not cgroups: ${this.cgroups.unavailable}`);
    }
    if (!(this.cgroups instanceof HostCgroups)) return undefined;
    try {
      return this.cgroups.sandbox(spec.dirName, 0);
    } catch (err) {
      this.log.with({ key: spec.identity.key }).debug(`commands are found by tags, not cgroups: ${String(err)}`);
      return undefined;
    }
  }

  /** Deletes the sandbox dir, only ever under this installation's local sandbox root. */
  async remove(ref: string, hostDir: string | undefined): Promise<void> {
    for (const dir of new Set([ref, hostDir])) {
      if (dir !== undefined) await removeUnder(this.root, dir);
    }
    // Its cgroup goes once its shells have; what a command left running keeps it until it ends,
    // and the next removal takes it then.
    if (this.cgroups instanceof HostCgroups) {
      await this.cgroups.remove(basename(ref));
      this.cgroups.reap();
    }
    this.log.with({ ref }).debug('removed');
  }

  async reapIdleGroups(): Promise<void> {
    if (this.cgroups instanceof HostCgroups) this.cgroups.reap();
  }

  async stop(_ref: string): Promise<void> {
    // A directory has nothing to stop; its shells are closed by the broker.
  }

  async listManaged(): Promise<ManagedSandbox[]> {
    // Host dirs carry no labels; the broker reaps local sandboxes from its own records.
    return [];
  }

  async close(): Promise<void> {
    if (this.cgroups instanceof HostCgroups) await this.cgroups.close();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}
