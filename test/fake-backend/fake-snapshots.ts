import { randomBytes } from 'node:crypto';
import { cpSync, existsSync, lstatSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import type { ForbiddenValue, Sandbox, SandboxSpec, SnapshotBudget, SnapshotCapability, SnapshotRef } from '../../src/backends/backend.js';
import { BudgetSpender } from '../../src/backends/plumbing/snapshot-budget.js';
import { ProcessSandbox } from '../../src/backends/plumbing/process-sandbox.js';
import { removeUnder } from '../../src/backends/plumbing/remove-under.js';
import { BerthError, PolicyRefusedError } from '../../src/errors.js';
import type { FakeContainer, FakeEngine } from './fake-engine.js';
import { FakeSandboxHandle } from './fake-sandbox.js';

/** Written last into a snapshot's dir: a copy without it never completed. */
const COMPLETE = '.berth-snapshot-complete';

/**
 * Snapshots on the fake engine, honestly: a snapshot is a copy of the sandbox's dir (its files
 * and its `.berth` state, the shells' saved state with it), a restore or fork a new fake sandbox
 * whose dir starts as that copy. A test removes a snapshot's dir behind berth's back as an
 * operator would `docker rmi` an image.
 */
export class FakeSnapshots implements SnapshotCapability {
  constructor(
    private readonly engine: FakeEngine,
    private readonly installation: string,
    /** The fake backend's sandbox dirs: `$BERTH_HOME/sandboxes/<name>`. */
    private readonly sandboxRoot: string,
    /** Where its snapshots live: `$BERTH_HOME/snapshots/<name>`. */
    private readonly root: string,
  ) {}

  async create(sandbox: Sandbox, id: string, forbidden: readonly ForbiddenValue[], budget: SnapshotBudget): Promise<SnapshotRef> {
    const c = this.engine.byRef(sandbox.ref);
    if (c === undefined) throw new BerthError('not_found', `fake sandbox ${sandbox.name} is gone; nothing to snapshot`);
    if (!/^[A-Za-z0-9_-]{1,64}$/.test(id)) throw new BerthError('internal', `snapshot id "${id}" cannot name a dir`);
    // As the real backends: measured against the budget (and claimed) before anything is copied.
    new BudgetSpender(id, budget).spend('its dir', bytesUnder(c.dir));
    await this.engine.midSnapshot?.();
    mkdirSync(this.root, { recursive: true, mode: 0o700 });
    const ref = join(this.root, id);
    try {
      cpSync(c.dir, ref, { recursive: true, verbatimSymlinks: true });
      const found = findForbidden(ref, forbidden);
      if (found !== undefined) {
        throw new PolicyRefusedError(`the snapshot would hold the value of secret ${found.name} (in ${found.path}); ` +
          'remove that file or the value from it, then snapshot again');
      }
      writeFileSync(join(ref, COMPLETE), c.dir);
      return { ref, bytes: bytesUnder(ref) };
    } catch (err) {
      await removeUnder(this.root, ref);
      throw err;
    }
  }

  async verify(ref: string): Promise<void> {
    if (!existsSync(ref)) throw new BerthError('not_found', `snapshot dir ${ref} is missing`);
    if (!existsSync(join(ref, COMPLETE))) throw new BerthError('not_found', `snapshot dir ${ref} is incomplete`);
  }

  async createFrom(spec: SandboxSpec, ref: string, replacing: { ref: string; hostDir: string | undefined } | undefined): Promise<Sandbox> {
    await this.verify(ref);
    const final = join(this.sandboxRoot, spec.dirName);
    const name = spec.ephemeral ? `fake-${spec.digest.slice(0, 16)}-${randomBytes(4).toString('hex')}` : `fake-${spec.digest.slice(0, 24)}`;
    const staging = `${final}.restoring-${randomBytes(4).toString('hex')}`;
    const made = this.engine.create({
      name: replacing === undefined ? name : `${name}-restoring-${randomBytes(4).toString('hex')}`,
      installation: this.installation, digest: spec.digest, ephemeral: spec.ephemeral, dir: replacing === undefined ? final : staging,
    });
    try {
      cpSync(ref, made.dir, { recursive: true, verbatimSymlinks: true, force: true });
      rebaseShellState(made.dir, readFileSync(join(ref, COMPLETE), 'utf8'), final);
      if (replacing !== undefined) {
        await this.engine.remove(replacing.ref);
        this.engine.rename(made.ref, name, final);
      }
    } catch (err) {
      await this.engine.remove(made.ref);
      throw err;
    }
    if (replacing !== undefined) await this.engine.midRestore?.();
    return this.sandbox(spec, made);
  }

  async remove(ref: string): Promise<void> {
    await this.engine.midSnapshotRemove?.();
    await removeUnder(this.root, ref);
  }

  async list(): Promise<string[]> {
    if (!existsSync(this.root)) return [];
    return readdirSync(this.root).map((d) => join(this.root, d));
  }

  private sandbox(spec: SandboxSpec, c: FakeContainer): Sandbox {
    return new ProcessSandbox(new FakeSandboxHandle(spec, c, this.engine, false));
  }
}

/**
 * A container's paths stay the same in a copy of it; a fake sandbox's are its host dir, so the
 * shells' saved state (HOME, a cwd) names the dir it was saved in: a copy elsewhere gets them
 * rewritten to its own dir, as a container's would need no rewrite at all.
 */
function rebaseShellState(dir: string, from: string, to: string): void {
  const shells = join(dir, '.berth', 'shells');
  if (from === to || !existsSync(shells)) return;
  for (const f of readdirSync(shells).filter((n) => n.endsWith('.sh'))) {
    const p = join(shells, f);
    writeFileSync(p, readFileSync(p, 'utf8').split(from).join(to));
  }
}

/** The first regular file under `dir` holding one of `values`, named by its path inside the sandbox. */
function findForbidden(dir: string, values: readonly ForbiddenValue[]): { name: string; path: string } | undefined {
  const wanted = values.filter((v) => v.value !== '');
  if (wanted.length === 0) return undefined;
  for (const file of filesUnder(dir)) {
    const text = readFileSync(file, 'latin1');
    const hit = wanted.find((v) => text.includes(Buffer.from(v.value).toString('latin1')));
    if (hit !== undefined) return { name: hit.name, path: relative(dir, file) };
  }
  return undefined;
}

function bytesUnder(dir: string): number {
  return filesUnder(dir).reduce((n, f) => n + lstatSync(f).size, 0);
}

function filesUnder(dir: string): string[] {
  const out: string[] = [];
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, entry.name);
    if (entry.isDirectory()) out.push(...filesUnder(p));
    else if (entry.isFile()) out.push(p);
  }
  return out;
}
