import { mkdirSync, readdirSync, readFileSync, renameSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { removeUnder } from '../../src/backends/plumbing/remove-under.js';

/** Env name every process of a fake sandbox carries, so the engine finds them all (as a container holds its processes). */
export const FAKE_SANDBOX_ENV = 'BERTH_FAKE_SANDBOX';

/** One sandbox as the fake engine keeps it: labels, and whether it "runs". */
export interface FakeContainer {
  ref: string;
  name: string;
  installation: string;
  digest: string;
  ephemeral: boolean;
  running: boolean;
  /** Its host dir (under its installation's `sandboxes/fake/`): its processes start there; removing the sandbox removes it. */
  dir: string;
}

/**
 * An in-memory engine, shared by every fake backend made on it the way processes share one
 * dockerd: it names, labels, lists, stops and removes sandboxes. Processes are real host
 * processes in each sandbox's dir (see fake-sandbox.ts); stopping or removing a sandbox kills
 * every process that carries its tag, so jobs die with it as they do in a container.
 */
export class FakeEngine {
  private readonly sandboxes = new Map<string, FakeContainer>();
  private counter = 0;
  /** Set by a test: every create fails with this message (an engine that cannot create now). */
  refuseCreates: string | undefined;
  /** Set by a test: runs in a restore once the new sandbox is made, before it is returned (and recorded). */
  midRestore: (() => Promise<void>) | undefined;
  /** Set by a test: runs in a snapshot's create once its size is claimed against the budget, before it is copied. */
  midSnapshot: (() => Promise<void>) | undefined;
  /** Set by a test: runs in a snapshot's removal before its copy is removed. */
  midSnapshotRemove: (() => Promise<void>) | undefined;

  byName(name: string): FakeContainer | undefined {
    return [...this.sandboxes.values()].find((c) => c.name === name);
  }

  byRef(ref: string): FakeContainer | undefined {
    return this.sandboxes.get(ref);
  }

  list(installation: string): FakeContainer[] {
    return [...this.sandboxes.values()].filter((c) => c.installation === installation);
  }

  /** Every sandbox of every installation (for a test's own checks). */
  all(): FakeContainer[] {
    return [...this.sandboxes.values()];
  }

  create(c: Omit<FakeContainer, 'ref' | 'running'>): FakeContainer {
    if (this.refuseCreates !== undefined) throw new Error(this.refuseCreates);
    if (this.byName(c.name) !== undefined) throw new Error(`name ${c.name} is taken`);
    this.counter += 1;
    const ref = `fake${String(this.counter).padStart(8, '0')}${c.digest.slice(0, 8)}`;
    mkdirSync(join(c.dir, '.berth'), { recursive: true, mode: 0o700 });
    const dir = c.dir;
    const made = { ...c, ref, dir, running: true };
    this.sandboxes.set(ref, made);
    return made;
  }

  /** A sandbox takes another name and dir (a restore's new sandbox taking over its old one's); the dir moves with it. */
  rename(ref: string, name: string, dir: string): void {
    const c = this.sandboxes.get(ref);
    if (c === undefined) throw new Error(`no fake sandbox ${ref}`);
    if (this.byName(name) !== undefined) throw new Error(`name ${name} is taken`);
    renameSync(c.dir, dir);
    c.name = name;
    c.dir = dir;
  }

  start(ref: string): void {
    const c = this.sandboxes.get(ref);
    if (c !== undefined) c.running = true;
  }

  stop(ref: string): void {
    const c = this.sandboxes.get(ref);
    if (c === undefined) return;
    c.running = false;
    killTagged(ref);
  }

  /** Removes a sandbox, its processes and its dir; one that is gone already is success. */
  async remove(ref: string): Promise<void> {
    const c = this.sandboxes.get(ref);
    this.sandboxes.delete(ref);
    killTagged(ref);
    if (c !== undefined) await removeUnder(dirname(c.dir), c.dir);
  }

  /** What a test calls as `docker rm -f` behind berth's back. */
  removeOutOfBand(ref: string): Promise<void> {
    return this.remove(ref);
  }

  /** Everything, at a test's end. */
  async removeAll(): Promise<void> {
    for (const ref of [...this.sandboxes.keys()]) await this.remove(ref);
  }
}

/** SIGKILL, twice over, every process whose environment carries the sandbox's tag. */
export function killTagged(ref: string): void {
  const needle = `${FAKE_SANDBOX_ENV}=${ref}`;
  for (let pass = 0; pass < 2; pass++) {
    for (const pid of readdirSync('/proc').filter((d) => /^\d+$/.test(d))) {
      let environ: string;
      try {
        environ = readFileSync(`/proc/${pid}/environ`, 'latin1');
      } catch {
        continue;
      }
      if (!environ.split('\0').includes(needle)) continue;
      try {
        process.kill(Number(pid), 'SIGKILL');
      } catch {
        // gone meanwhile
      }
    }
  }
}
