import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { readdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { BerthError } from '../../errors.js';
import type { Logger } from '../../logging/logger.js';
import type { ForbiddenValue, Sandbox, SandboxSpec, SnapshotBudget, SnapshotCapability, SnapshotRef } from '../backend.js';
import { findForbidden, forbiddenRefusal } from '../plumbing/forbidden-scan.js';
import { BudgetSpender } from '../plumbing/snapshot-budget.js';
import { assertSnapshotId, checkCopy, damagedSnapshot, makeSnapshotDir, packDir, removeSnapshotDir, snapshotsRoot, treeBytes, treeTally, unpackAs, type TreeTally } from '../plumbing/snapshot-files.js';
import type { SshConnectionPool } from './connections.js';
import type { RemoteResult, RemoteRunner } from './remote-exec.js';
import { helperFailure, remoteStream } from './remote-stream.js';
import type { SshSettings } from './settings.js';
import { SNAP_DROP_SCRIPT, SNAP_MEASURE_SCRIPT, SNAP_PACK_SCRIPT, SNAP_STAGE_SCRIPT, SNAP_SWAP_SCRIPT } from './snapshot-scripts.js';
import type { SshTarget } from './target.js';

/*
 * An ssh sandbox's snapshot: a copy of its account's home (which holds its workspace, its TMPDIR
 * and berth's state dir with each shell's saved state) on berth's own host, under
 * `$BERTH_HOME/snapshots/ssh/<id>/home`, private to berth (0700). It lives on berth's host, not
 * the ssh host: there the shared forbidden-value scan reads it as it reads bwrap's and docker's
 * copies (no second scan on the remote side), the tenant's snapshot bytes are berth's disk to
 * count, no sandbox account can ever reach it (not even one given the same uid by a careless
 * admin later), and it outlives the account and the host it was taken on.
 *
 * It travels as a tar stream over the ssh channel both ways, never whole in memory: out of the
 * home as the account, its processes ended (snapshot-scripts.ts), into a staging dir of the
 * new sandbox's home as that account, so every restored file is the new account's, with no
 * setuid or setgid bit. The ref is the snapshot's dir.
 */

const META = 'meta.json';
/** Time one archive may take to go out of or into a home. */
const STREAM_TIMEOUT_MS = 30 * 60_000;
const HELPER_TIMEOUT_MS = 5 * 60_000;

interface SnapshotMeta {
  id: string;
  installation: string;
  /** Where it was taken: the account and its home, for messages. */
  account: string;
  home: string;
  /** What the copy of the home held when the snapshot was made (absent in one an earlier berth made). */
  tally?: TreeTally;
}

/** Where a sandbox account lives: the connections to its host and its home root. */
export interface SshPlace {
  pool: SshConnectionPool;
  target: SshTarget;
  run: RemoteRunner;
  homeRoot: string;
  account: string;
}

/** What the snapshots need of the ssh backend that owns them. */
export interface SshSnapshotHost {
  berthHome: string;
  installation: string;
  log: Logger;
  /** Where the sandbox recorded as `ref` lives. */
  placeOf(ref: string): SshPlace;
  /** `ensure`, saying whether the account was created by it. */
  open(spec: SandboxSpec<SshSettings>, knownRef: string | undefined): Promise<{ sandbox: Sandbox; created: boolean }>;
  removeSandbox(ref: string): Promise<void>;
}

export class SshSnapshots implements SnapshotCapability<SshSettings> {
  private readonly root: string;

  constructor(private readonly host: SshSnapshotHost) {
    this.root = snapshotsRoot(host.berthHome, 'ssh');
  }

  async create(sandbox: Sandbox, id: string, forbidden: readonly ForbiddenValue[], budget: SnapshotBudget): Promise<SnapshotRef> {
    assertSnapshotId(id);
    const spender = new BudgetSpender(id, budget);
    const place = this.host.placeOf(sandbox.ref);
    const args = [place.account, place.homeRoot, this.host.installation];
    const home = sandbox.homeDir;
    const dir = await makeSnapshotDir(this.root, id);
    try {
      // Its processes end first (as at a stop; the caller brings it up again), so what is
      // measured against the budget is what is archived.
      const sizes = resultWords(await place.run(SNAP_MEASURE_SCRIPT, args, { timeoutMs: HELPER_TIMEOUT_MS }), 'sizes', `measure ${home} for snapshot ${id}`);
      const [workspace, all] = sizes.map(Number) as [number, number];
      spender.spend(sandbox.defaultCwd, workspace);
      spender.spend(`${home} (besides ${sandbox.defaultCwd})`, Math.max(0, all - workspace));
      const out = await remoteStream(place.pool, place.target, SNAP_PACK_SCRIPT, args, { timeoutMs: STREAM_TIMEOUT_MS });
      // A local tar that gave up stops reading: the channel is closed, or the remote tar would wait on it.
      const unpacking = unpackAs(out.stdout, path.join(dir, 'home'), undefined, 'mine').catch((e: unknown) => {
        out.cancel();
        throw e;
      });
      const [unpacked, exited] = await Promise.allSettled([unpacking, out.exited]);
      if (exited.status === 'rejected') throw unpacked.status === 'rejected' ? unpacked.reason : exited.reason;
      if (exited.value.code !== 0) throw new BerthError('transfer_failed', `snapshot ${id}: the archive of ${home} could not be made: ${helperFailure(exited.value)}`);
      if (unpacked.status === 'rejected') throw unpacked.reason;
      const hit = await findForbidden([{ hostDir: path.join(dir, 'home'), sandboxDir: home }], forbidden);
      if (hit !== undefined) throw forbiddenRefusal(id, hit);
      const meta: SnapshotMeta = { id, installation: this.host.installation, account: place.account, home, tally: await treeTally(path.join(dir, 'home')) };
      await writeFile(path.join(dir, META), `${JSON.stringify(meta, null, 2)}\n`, { mode: 0o600 });
      this.host.log.with({ ref: sandbox.ref }).debug(`snapshot ${id}: ${all} bytes of ${home}`);
      return { ref: dir, bytes: await treeBytes(dir) };
    } catch (err) {
      await this.removeDir(id);
      throw err;
    }
  }

  async verify(ref: string): Promise<void> {
    const { id, dir } = this.parseRef(ref);
    const meta = await this.readMeta(id, dir);
    await checkCopy(id, "the account's home", path.join(dir, 'home'), meta.tally);
  }

  /**
   * The sandbox of `spec` (the replaced one's account, adopted, for a restore; a new account for
   * a fork) gets the snapshot's home: unpacked into a staging dir of its home as the account,
   * then swapped in by renames with the account's processes ended. On any failure the staging
   * dir goes, the home is as it was, and an account this call created is removed.
   */
  async createFrom(
    spec: SandboxSpec<SshSettings>, ref: string, replacing: { ref: string; hostDir: string | undefined } | undefined,
  ): Promise<Sandbox> {
    await this.verify(ref);
    const { id, dir } = this.parseRef(ref);
    const { sandbox, created } = await this.host.open(spec, replacing?.ref);
    const place = this.host.placeOf(sandbox.ref);
    const stage = `.berth-restore-${randomBytes(8).toString('hex')}`;
    const meta = await this.readMeta(id, dir);
    const args = [place.account, place.homeRoot, this.host.installation, stage];
    try {
      const into = await remoteStream(place.pool, place.target, SNAP_STAGE_SCRIPT, [...args, meta.account], { stdin: packDir(path.join(dir, 'home')), timeoutMs: STREAM_TIMEOUT_MS });
      into.stdout.resume();
      const staged = await into.exited;
      if (staged.code !== 0) throw new BerthError('transfer_failed', `snapshot ${id} could not be put into ${sandbox.homeDir}: ${helperFailure(staged)}`);
      resultWords(await place.run(SNAP_SWAP_SCRIPT, args, { timeoutMs: HELPER_TIMEOUT_MS }), 'swapped', `put snapshot ${id} in place in ${sandbox.homeDir}`);
    } catch (err) {
      await place.run(SNAP_DROP_SCRIPT, args, { timeoutMs: HELPER_TIMEOUT_MS })
        .catch((e: unknown) => this.host.log.with({ ref: sandbox.ref }).debug(`could not remove ${stage} after a failed restore: ${String(e)}`));
      if (created) {
        await this.host.removeSandbox(sandbox.ref)
          .catch((e: unknown) => this.host.log.with({ ref: sandbox.ref }).debug(`could not remove the account made for a failed restore: ${String(e)}`));
      }
      throw err;
    }
    if (replacing !== undefined && replacing.ref !== sandbox.ref) await this.host.removeSandbox(replacing.ref);
    return sandbox;
  }

  async remove(ref: string): Promise<void> {
    const { id } = this.parseRef(ref);
    await this.removeDir(id);
  }

  /** This installation's snapshots in this BERTH_HOME (meta.json names the installation). */
  async list(): Promise<string[]> {
    const names = await readdir(this.root).catch(() => [] as string[]);
    const out: string[] = [];
    for (const n of names) {
      const dir = path.join(this.root, n);
      const meta = await this.readMeta(n, dir).catch(() => undefined);
      if (meta?.installation === this.host.installation) out.push(dir);
    }
    return out;
  }

  /** A copy keeps the account's modes, so a dir it made read-only is made writable first: a berth not running as root removes it too. */
  private async removeDir(id: string): Promise<void> {
    assertSnapshotId(id);
    const dir = path.join(this.root, id);
    if (existsSync(dir)) await chmodWritable(dir).catch(() => undefined);
    await removeSnapshotDir(this.root, id);
  }

  private parseRef(ref: string): { id: string; dir: string } {
    const dir = path.resolve(ref);
    const id = path.basename(dir);
    if (path.dirname(dir) !== this.root) {
      throw new BerthError('invalid_ref', `"${ref}" is not an ssh snapshot of this installation (they live in ${this.root}); the record belongs to another backend or BERTH_HOME`);
    }
    assertSnapshotId(id);
    return { id, dir };
  }

  private async readMeta(id: string, dir: string): Promise<SnapshotMeta> {
    const text = await readFile(path.join(dir, META), 'utf8').catch(() => undefined);
    if (text === undefined) throw damagedSnapshot(id, `its files ${dir} are gone`);
    let meta: SnapshotMeta;
    try {
      meta = JSON.parse(text) as SnapshotMeta;
    } catch {
      throw damagedSnapshot(id, `${path.join(dir, META)} is not valid JSON`);
    }
    if (meta.installation !== this.host.installation) throw damagedSnapshot(id, `${path.join(dir, META)} names another installation`);
    return meta;
  }
}

/** The words after `word` on the helper's result line, or the error it reported (its `E` line on stderr). */
function resultWords(r: RemoteResult, word: string, doing: string): string[] {
  const line = r.stdout.split('\n').find((l) => l.startsWith(`${word} `) || l === word);
  if (line === undefined || r.code !== 0) {
    throw new BerthError('transfer_failed', `could not ${doing}: ${helperFailure({ code: r.code, signal: r.signal, stderr: r.stderr })}`);
  }
  return line.split(' ').slice(1);
}

/** `chmod -R u+rwX`, links not followed. */
function chmodWritable(dir: string): Promise<void> {
  return new Promise((resolve, reject) => {
    execFile('chmod', ['-R', 'u+rwX', '--', dir], { timeout: HELPER_TIMEOUT_MS }, (err) => (err ? reject(err) : resolve()));
  });
}
