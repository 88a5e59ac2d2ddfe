import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import type { Backend, ManagedSandbox, Sandbox, SandboxSpec, SnapshotCapability } from '../../src/backends/backend.js';
import { ProcessSandbox } from '../../src/backends/plumbing/process-sandbox.js';
import { BackendUnavailableError, BerthError, PolicyRefusedError } from '../../src/errors.js';
import { Logger } from '../../src/logging/logger.js';
import type { FakeContainer, FakeEngine } from './fake-engine.js';
import { FakeSandboxHandle } from './fake-sandbox.js';

/**
 * A backend on the fake engine with the lifecycle of a container backend: a persistent sandbox
 * has a name derived from its identity (create or adopt), an ephemeral one a unique name per
 * creation that only its recorded ref finds again, another installation's is never adopted, and
 * one removed out of band is recreated (and says so).
 */
export class FakeBackend implements Backend {
  private closed = false;

  constructor(
    readonly name: string,
    private readonly engine: FakeEngine,
    private readonly installation: string,
    /** Where this installation's fake sandboxes keep their dirs: `$BERTH_HOME/sandboxes/<name>`. */
    private readonly root: string,
    private readonly log: Logger = Logger.silent(),
    /** Snapshots (copies of a sandbox's dir), when the module was made with them. */
    readonly snapshots?: SnapshotCapability,
  ) {}

  async check(): Promise<void> {
    if (this.closed) throw new BackendUnavailableError('the fake backend was closed');
  }

  async ensure(spec: SandboxSpec, knownRef: string | undefined): Promise<Sandbox> {
    if (this.closed) throw new BackendUnavailableError('the fake backend was closed');
    if (spec.identity.installation !== this.installation) throw new BerthError('internal', 'a spec of another installation');
    if (spec.ephemeral) {
      const known = knownRef === undefined ? undefined : this.engine.byRef(knownRef);
      if (known !== undefined) return this.sandbox(spec, this.owned(spec, known), false);
      return this.sandbox(spec, this.create(spec, `fake-${spec.digest.slice(0, 16)}-${randomBytes(4).toString('hex')}`), knownRef !== undefined);
    }
    const name = `fake-${spec.digest.slice(0, 24)}`;
    const existing = this.engine.byName(name);
    if (existing !== undefined) return this.sandbox(spec, this.owned(spec, existing), knownRef !== undefined && knownRef !== existing.ref);
    return this.sandbox(spec, this.create(spec, name), knownRef !== undefined);
  }

  async remove(ref: string): Promise<void> {
    await this.engine.remove(ref);
    this.log.with({ ref }).debug('removed');
  }

  async stop(ref: string): Promise<void> {
    this.engine.stop(ref);
  }

  async listManaged(): Promise<ManagedSandbox[]> {
    return this.engine.list(this.installation).map((c) => ({ ref: c.ref, name: c.name, digest: c.digest, ephemeral: c.ephemeral, running: c.running }));
  }

  async close(): Promise<void> {
    this.closed = true;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  private create(spec: SandboxSpec, name: string): FakeContainer {
    const made = this.engine.create({ name, installation: this.installation, digest: spec.digest, ephemeral: spec.ephemeral, dir: join(this.root, spec.dirName) });
    this.log.with({ key: spec.identity.key, ref: made.ref }).debug(`created ${name}`);
    return made;
  }

  private owned(spec: SandboxSpec, c: FakeContainer): FakeContainer {
    if (c.installation !== this.installation || c.digest !== spec.digest || c.ephemeral !== spec.ephemeral) {
      throw new PolicyRefusedError(`fake sandbox ${c.name} does not belong to sandbox "${spec.identity.key}" of this installation; berth never adopts it`);
    }
    this.engine.start(c.ref);
    return c;
  }

  private sandbox(spec: SandboxSpec, c: FakeContainer, recreated: boolean): Sandbox {
    return new ProcessSandbox(new FakeSandboxHandle(spec, c, this.engine, recreated));
  }
}
