import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import type { ProfileSettings } from '../../config/types.js';
import { Logger } from '../../logging/logger.js';
import type { Backend, ManagedSandbox, Sandbox, SandboxSpec } from '../backend.js';
import { removeUnder } from '../plumbing/remove-under.js';
import { LocalSandbox, LocalSandboxHandle } from './local-sandbox.js';
import { localSandboxesRoot } from './paths.js';

/**
 * `backend: local` runs the shell on the host in a per-sandbox directory. It isolates NOTHING:
 * commands see the whole host filesystem as the user running berth. It exists for development and
 * for machines with no engine, and is used only when the config says `backend: local`.
 * What it does guarantee: the shell's environment is built only from grants (plus PATH, HOME, LANG,
 * TERM), never berth's whole environment.
 */
export class LocalBackend implements Backend {
  readonly name = 'local' as const;
  private readonly root: string;
  private readonly log: Logger;

  constructor(opts: { berthHome: string; log?: Logger }) {
    this.root = localSandboxesRoot(opts.berthHome);
    this.log = opts.log ?? Logger.silent();
  }

  async check(_settings: ProfileSettings): Promise<void> {
    // Nothing to reach: the host is always there.
  }

  async ensure(spec: SandboxSpec, _knownRef: string | undefined): Promise<Sandbox> {
    const dir = join(this.root, spec.dirName);
    mkdirSync(join(dir, '.berth'), { recursive: true, mode: 0o700 });
    return new LocalSandbox(new LocalSandboxHandle(spec, dir));
  }

  /** Deletes the sandbox dir, only ever under this installation's local sandbox root. */
  async remove(ref: string, hostDir: string | undefined): Promise<void> {
    for (const dir of new Set([ref, hostDir])) {
      if (dir !== undefined) await removeUnder(this.root, dir);
    }
    this.log.with({ ref }).debug('removed');
  }

  async stop(_ref: string): Promise<void> {
    // A directory has nothing to stop; its shells are closed by the broker.
  }

  async listManaged(): Promise<ManagedSandbox[]> {
    // Host dirs carry no labels; the broker reaps local sandboxes from its own records.
    return [];
  }

  async close(): Promise<void> {}

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}
