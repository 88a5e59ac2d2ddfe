import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { lstat, mkdtemp, readdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { BerthError } from '../../errors.js';
import type { Logger } from '../../logging/logger.js';
import type { ForbiddenValue, Sandbox, SandboxSpec, SnapshotBudget, SnapshotCapability, SnapshotRef } from '../backend.js';
import { findForbidden, forbiddenRefusal } from '../plumbing/forbidden-scan.js';
import { apparentBytes, BudgetSpender } from '../plumbing/snapshot-budget.js';
import { assertSnapshotId, checkCopy, copyTree, damagedSnapshot, makeSnapshotDir, removeSnapshotDir, snapshotsRoot, tallies, treeBytes, type TreeTally } from '../plumbing/snapshot-files.js';
import { SANDBOX_HOME, SANDBOX_WORKSPACE, type SandboxDirs } from './layout.js';
import type { BwrapSettings } from './settings.js';

/*
 * A bwrap sandbox's snapshot: a copy of its own dirs (home, and the workspace unless the user
 * attached one: that is the user's, never copied, and the snapshot's meta.json says so) under
 * `$BERTH_HOME/snapshots/bwrap/<id>/`, by `cp -a --reflink=auto`. Everything else a bwrap sandbox
 * sees is the host's, read-only, or a tmpfs its restart empties. The ref is the snapshot's dir.
 */

const META = 'meta.json';
const OWN_DIRS = [{ name: 'home', target: SANDBOX_HOME }, { name: 'workspace', target: SANDBOX_WORKSPACE }] as const;
type OwnDirName = (typeof OWN_DIRS)[number]['name'];
const CHOWN_TIMEOUT_MS = 10 * 60_000;

interface SnapshotMeta {
  id: string;
  installation: string;
  dirs: OwnDirName[];
  excluded: string[];
  /** What each copied dir held when the snapshot was made (absent in one an earlier berth made). */
  tally?: Partial<Record<OwnDirName, TreeTally>>;
}

/** What the snapshots need of the bwrap backend that owns them. */
export interface BwrapSnapshotHost {
  berthHome: string;
  installation: string;
  log: Logger;
  /** The dirs of the sandbox whose ref is `ref` (a sandbox dir of a root this installation uses). */
  dirsOf(ref: string): SandboxDirs;
  /** The name `ensure` gives a new sandbox of `spec`. */
  newName(spec: SandboxSpec<BwrapSettings>): string;
  /**
   * Makes the new sandbox `name` of `spec` (dirs, uid), lets `fill` put files in its dirs, and
   * starts it; a failure removes what was made. One whose dir exists already is refused.
   */
  startFilled(spec: SandboxSpec<BwrapSettings>, name: string, fill: (dirs: SandboxDirs, owner: { uid: number; gid: number } | undefined) => Promise<void>): Promise<Sandbox>;
  /** Starts the sandbox `name` of `spec` over its existing dirs (a restore's, or the old ones again after a failed one). */
  startExisting(spec: SandboxSpec<BwrapSettings>, name: string): Promise<Sandbox>;
  /** Ends every process over the sandbox's dirs; its files stay. */
  stopAll(ref: string): Promise<void>;
  removeSandbox(ref: string): Promise<void>;
}

export class BwrapSnapshots implements SnapshotCapability<BwrapSettings> {
  private readonly root: string;

  constructor(private readonly host: BwrapSnapshotHost) {
    this.root = snapshotsRoot(host.berthHome, 'bwrap');
  }

  async create(sandbox: Sandbox, id: string, forbidden: readonly ForbiddenValue[], budget: SnapshotBudget): Promise<SnapshotRef> {
    assertSnapshotId(id);
    const spender = new BudgetSpender(id, budget);
    const dirs = this.host.dirsOf(sandbox.ref);
    const dir = await makeSnapshotDir(this.root, id);
    try {
      const attached = sandbox.spec.mount !== null;
      const kept = OWN_DIRS.filter((d) => d.name !== 'workspace' || !attached);
      // No process of the sandbox may run while `cp` opens its paths on the host (one swapping a
      // dir for a symlink mid-copy could point it at host files): its processes end first, as at
      // a hibernation (the broker closed its shells and refuses a snapshot while a job runs), and
      // the next call starts it again. So what is measured against the budget first is what is copied.
      await this.host.stopAll(sandbox.ref);
      for (const d of kept) spender.spend(d.target, await apparentBytes(dirs[d.name]));
      for (const d of kept) await copyTree(dirs[d.name], path.join(dir, d.name));
      const hit = await findForbidden(kept.map((d) => ({ hostDir: path.join(dir, d.name), sandboxDir: d.target })), forbidden);
      if (hit !== undefined) throw forbiddenRefusal(id, hit);
      const meta: SnapshotMeta = {
        id, installation: this.host.installation, dirs: kept.map((d) => d.name), tally: await tallies(dir, kept.map((d) => d.name)),
        excluded: attached ? [`${SANDBOX_WORKSPACE}: the attached workspace ${sandbox.spec.mount ?? ''} is the user's, not part of the snapshot`] : [],
      };
      await writeFile(path.join(dir, META), `${JSON.stringify(meta, null, 2)}\n`, { mode: 0o600 });
      return { ref: dir, bytes: await treeBytes(dir) };
    } catch (err) {
      await removeSnapshotDir(this.root, id);
      throw err;
    }
  }

  async verify(ref: string): Promise<void> {
    const { id, dir } = this.parseRef(ref);
    const meta = await this.readMeta(id, dir);
    for (const d of meta.dirs) await checkCopy(id, targetOf(d), path.join(dir, d), meta.tally?.[d]);
  }

  async createFrom(
    spec: SandboxSpec<BwrapSettings>, ref: string, replacing: { ref: string; hostDir: string | undefined } | undefined,
  ): Promise<Sandbox> {
    await this.verify(ref);
    const { id, dir } = this.parseRef(ref);
    const meta = await this.readMeta(id, dir);
    const wanted = meta.dirs.filter((d) => d !== 'workspace' || spec.mount === null);
    if (replacing !== undefined && !spec.ephemeral) return this.replacePersistent(spec, dir, wanted, replacing.ref);
    const sandbox = await this.host.startFilled(spec, this.host.newName(spec), (dirs, owner) => fill(dir, wanted, dirs, owner));
    if (replacing !== undefined) await this.host.removeSandbox(replacing.ref);
    return sandbox;
  }

  async remove(ref: string): Promise<void> {
    const { id } = this.parseRef(ref);
    await removeSnapshotDir(this.root, id);
  }

  async list(): Promise<string[]> {
    const names = await readdir(this.root).catch(() => [] as string[]);
    return names.filter((n) => existsSync(path.join(this.root, n, META))).map((n) => path.join(this.root, n));
  }

  /**
   * A restore of a persistent sandbox: its processes end, its dirs are swapped by rename for
   * copies of the snapshot's (made beside them first), and it starts over them; the old dirs go
   * only once it runs. On any failure the old dirs are put back and it starts over them again.
   */
  private async replacePersistent(spec: SandboxSpec<BwrapSettings>, snapDir: string, wanted: readonly OwnDirName[], oldRef: string): Promise<Sandbox> {
    const dirs = this.host.dirsOf(oldRef);
    const name = path.basename(dirs.root);
    const stage = await makeRestoreStage(dirs.root);
    const swapped: OwnDirName[] = [];
    try {
      const st = await lstat(dirs.workspace);
      const owner = { uid: st.uid, gid: st.gid };
      for (const d of wanted) await copyTree(path.join(snapDir, d), path.join(stage, d));
      await chownTree(stage, owner);
      await this.host.stopAll(oldRef);
      for (const d of wanted) {
        await rename(dirs[d], path.join(stage, `old-${d}`));
        await rename(path.join(stage, d), dirs[d]);
        swapped.push(d);
      }
      const sandbox = await this.host.startExisting(spec, name);
      await rm(stage, { recursive: true, force: true });
      return sandbox;
    } catch (err) {
      for (const d of swapped) {
        await rm(dirs[d], { recursive: true, force: true });
        await rename(path.join(stage, `old-${d}`), dirs[d]);
      }
      await rm(stage, { recursive: true, force: true });
      if (swapped.length > 0) await this.host.startExisting(spec, name).catch((e: unknown) => this.host.log.debug(`could not start ${name} again after a failed restore: ${String(e)}`));
      throw err;
    }
  }

  private parseRef(ref: string): { id: string; dir: string } {
    const dir = path.resolve(ref);
    const id = path.basename(dir);
    if (path.dirname(dir) !== this.root) {
      throw new BerthError('invalid_ref', `"${ref}" is not a bwrap snapshot of this installation (they live in ${this.root}); the record belongs to another backend or BERTH_HOME`);
    }
    assertSnapshotId(id);
    return { id, dir };
  }

  private async readMeta(id: string, dir: string): Promise<SnapshotMeta> {
    const text = await readFile(path.join(dir, META), 'utf8').catch(() => undefined);
    if (text === undefined) throw damagedSnapshot(id, `its files ${dir} are gone`);
    try {
      return JSON.parse(text) as SnapshotMeta;
    } catch {
      throw damagedSnapshot(id, `${path.join(dir, META)} is not valid JSON`);
    }
  }
}

/** The new sandbox's dirs get the snapshot's copies, owned by the uid it runs as. */
async function fill(snapDir: string, wanted: readonly OwnDirName[], dirs: SandboxDirs, owner: { uid: number; gid: number } | undefined): Promise<void> {
  for (const d of wanted) {
    await rm(dirs[d], { recursive: true, force: true });
    await copyTree(path.join(snapDir, d), dirs[d]);
    if (owner !== undefined) await chownTree(dirs[d], owner);
  }
}

/** `chown -R -h`: every entry, links as links, nothing followed out of the tree. */
function chownTree(dir: string, owner: { uid: number; gid: number }): Promise<void> {
  return new Promise((resolve, reject) => {
    execFile('chown', ['-R', '-h', '-P', `${owner.uid}:${owner.gid}`, '--', dir], { timeout: CHOWN_TIMEOUT_MS }, (err, _out, stderr) => {
      if (err) reject(new BerthError('transfer_failed', `chown of ${dir}: ${stderr.trim() || err.message}`, { cause: err }));
      else resolve();
    });
  });
}

function targetOf(d: OwnDirName): string {
  return d === 'home' ? SANDBOX_HOME : SANDBOX_WORKSPACE;
}

/**
 * A new, empty staging dir for a restore beside a sandbox's dirs (mode 0700), under a random name
 * `mkdtemp` makes atomically: two restores never share one, and neither removes another's.
 */
export function makeRestoreStage(sandboxRoot: string): Promise<string> {
  return mkdtemp(path.join(sandboxRoot, '.restore-'));
}
