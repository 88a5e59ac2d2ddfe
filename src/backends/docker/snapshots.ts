import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import type { Readable } from 'node:stream';
import type Dockerode from 'dockerode';
import { BerthError, PolicyRefusedError } from '../../errors.js';
import type { Logger } from '../../logging/logger.js';
import type { ForbiddenValue, Sandbox, SandboxSpec, SnapshotBudget, SnapshotCapability, SnapshotRef } from '../backend.js';
import { findForbidden, forbiddenRefusal } from '../plumbing/forbidden-scan.js';
import { apparentBytes, BudgetSpender } from '../plumbing/snapshot-budget.js';
import {
  assertSnapshotId, checkCopies, copyTree, damagedSnapshot, isEmptyDir, makeSnapshotDir, packDirs, removeSnapshotDir, snapshotsRoot, tallies, treeBytes, unpackAs, type TreeTally,
} from '../plumbing/snapshot-files.js';
import { ephemeralName, HOME, hostBindsOf, hostDirFor, LABEL, persistentName, sandboxesRoot, WORKSPACE, type CreatePlanInput, type StartPlan } from './container-spec.js';
import { describeEndpoint, fromDockerError, statusOf } from './engine.js';
import { whileFrozen } from './freeze.js';
import { hostViewOf, viewedDir, type HostView } from './host-view.js';
import type { CgroupDir } from '../cgroups/cgroup-dir.js';
import { POOL_LABEL } from '../labels.js';
import type { DockerSettings } from './settings.js';

/*
 * A docker sandbox's snapshot: an image committed from its container (its writable layer: what
 * the sandbox changed outside its own dirs), tagged `berth-snapshot:<installation>-<id>` and
 * labelled with the installation and the id, plus a copy of the sandbox's own dirs (home and
 * workspace: host dirs of a persistent sandbox, tmpfs of an ephemeral one) under
 * `$BERTH_HOME/snapshots/docker/<id>/`. A workspace the user attached, and the operator's volumes,
 * are the user's files, not the sandbox's: they are never copied, and the snapshot's meta.json
 * says which were left out. The ref is `<id>@<image id>`.
 */

/** The snapshot label (its value: the snapshot id). */
const SNAPSHOT_LABEL = 'berth.snapshot';
/** The tag of a removed snapshot's image a container still uses, until the orphan pass removes it. */
const GONE_PREFIX = 'gone-';
/** The repository of every snapshot image; the tag names the installation and the snapshot. */
const SNAPSHOT_REPO = 'berth-snapshot';
const META = 'meta.json';

/** A sandbox's own dirs a snapshot copies, by their name in the snapshot dir. */
const OWN_DIRS = [{ name: 'home', target: HOME }, { name: 'workspace', target: WORKSPACE }] as const;
type OwnDirName = (typeof OWN_DIRS)[number]['name'];

interface SnapshotMeta {
  id: string;
  installation: string;
  image: string;
  dirs: OwnDirName[];
  /** In-sandbox dirs the snapshot does not hold, with why. */
  excluded: string[];
  /** What each copied dir held when the snapshot was made (absent in one an earlier berth made). */
  tally?: Partial<Record<OwnDirName, TreeTally>>;
}

/** What the snapshots need of the docker backend that owns them. */
export interface DockerSnapshotHost {
  docker: Dockerode;
  installation: string;
  berthHome: string;
  log: Logger;
  /** One bounded engine request (the backend's `request`). */
  request<T>(doing: string, run: (abortSignal: AbortSignal) => Promise<T>): Promise<T>;
  /** What `ensure` would create for `spec` (limits, user), with `image` and `name` in place of its own. */
  planFor(spec: SandboxSpec<DockerSettings>, hostDir: string | undefined): Promise<Omit<CreatePlanInput, 'networkMode' | 'name' | 'image' | 'fill'>>;
  /** Creates and starts a container; `plan.fill`, an archive, is unpacked at `/` in it as it starts. */
  createAndStart(spec: SandboxSpec<DockerSettings>, plan: StartPlan): Promise<Dockerode.ContainerInspectInfo>;
  sandboxOf(spec: SandboxSpec<DockerSettings>, info: Dockerode.ContainerInspectInfo, hostDir: string | undefined): Sandbox;
  /** The container's own cgroup, where berth manages its groups from this host. */
  groupOf(info: Dockerode.ContainerInspectInfo): CgroupDir | undefined;
  /** Runs `fn` with the persistent sandbox's own dirs ready (its disk image mounted) and leased. */
  withHostDir<T>(spec: SandboxSpec<DockerSettings>, hostDir: string, fn: () => Promise<T>): Promise<T>;
  /** Makes `dir`'s home and workspace, owned by the user the sandbox runs as. */
  makeHostDirs(dir: string, runAs: { uid: number; gid: number } | undefined): Promise<void>;
  removeSandbox(ref: string, hostDir: string | undefined): Promise<void>;
}

export class DockerSnapshots implements SnapshotCapability<DockerSettings> {
  private readonly root: string;

  constructor(private readonly host: DockerSnapshotHost) {
    this.root = snapshotsRoot(host.berthHome, 'docker');
  }

  async create(sandbox: Sandbox, id: string, forbidden: readonly ForbiddenValue[], budget: SnapshotBudget): Promise<SnapshotRef> {
    assertSnapshotId(id);
    const spec = sandbox.spec as SandboxSpec<DockerSettings>;
    const spender = new BudgetSpender(id, budget);
    const dir = await makeSnapshotDir(this.root, id);
    let image: string | undefined;
    try {
      const container = this.host.docker.getContainer(sandbox.ref);
      const info = await this.host.request(`inspect container ${sandbox.ref.slice(0, 12)}`, (abortSignal) => container.inspect({ abortSignal }));
      const upper = forbidden.length === 0 ? undefined : this.upperDirOf(info, id);
      const base = await this.host.request(`inspect image ${info.Image}`, () => this.host.docker.getImage(info.Image).inspect());
      const own = this.ownDirsOf(sandbox, spec);
      const view = hostViewOf(sandboxesRoot(this.host.berthHome), info);
      // A tmpfs dir berth cannot see from here comes through the sandbox's archive (a tar the
      // engine runs in it), so before the pause; the host cannot measure it first, so it flows
      // through a cap and what it unpacked to (a sparse member's full size) counts after.
      for (const d of own.filter((o) => o.source === undefined && 'unavailable' in view)) {
        await unpackAs(await sandbox.getArchive(d.target), path.join(dir, d.name), spender.cap(d.target));
        spender.spend(d.target, await apparentBytes(path.join(dir, d.name)));
      }
      let counted: [Partial<Record<OwnDirName, TreeTally>>, number] | undefined;
      await this.paused(sandbox.ref, async () => {
        // In one pause: the writable layer measured (one over the budget is never committed), then
        // committed while the dirs berth copies on the host are measured and copied, and the layer
        // and the copies are read for granted values. What is measured and read is what the
        // snapshot holds, and no process of the sandbox can swap a dir for a link meanwhile (`cp`
        // and the scan open paths on the host). The commit is waited for on every path (it reads
        // the layer while the pause holds it); a value found, or dirs over the budget, remove the
        // image (below) before it was ever a snapshot; one a crash left is an orphan the snapshot
        // sweep removes (no record names it).
        const inLayer = upper === undefined ? Promise.resolve(undefined) : findForbidden([{ hostDir: upper, sandboxDir: '/' }], forbidden);
        inLayer.catch(() => undefined); // settled below on every path; not unhandled meanwhile
        try {
          spender.spend('its writable layer (files outside its own dirs)', await this.writableBytes(sandbox.ref, info));
        } catch (err) {
          await inLayer.catch(() => undefined);
          throw err;
        }
        const committing = this.commit(sandbox.ref, id, base.Config?.User ?? '').then((made) => { image = made; });
        // Each copy settles before this does: none still writes while a failed snapshot's dir goes.
        const copied = Promise.allSettled(own.filter((o) => o.source !== undefined || 'root' in view).map(async (d) => {
          const source = d.source ?? this.viewed(view, d.target);
          spender.spend(d.target, await apparentBytes(source));
          await copyTree(source, path.join(dir, d.name));
        })).then((all) => {
          for (const r of all) if (r.status === 'rejected') throw r.reason;
        });
        // The copies are read and counted once made (they are berth's, complete, and what a restore checks).
        const checked = copied.then(async () => {
          const inDirs = findForbidden(own.map((d) => ({ hostDir: path.join(dir, d.name), sandboxDir: d.target })), forbidden);
          const [hits, count] = await Promise.all([Promise.all([inLayer, inDirs]), Promise.all([tallies(dir, own.map((d) => d.name)), treeBytes(dir)] as const)]);
          return { hit: hits[0] ?? hits[1], count };
        });
        const [committed, done] = await Promise.allSettled([committing, checked]);
        await inLayer.catch(() => undefined);
        if (done.status === 'rejected') throw done.reason;
        counted = done.value.count;
        if (done.value.hit !== undefined) throw forbiddenRefusal(id, done.value.hit);
        if (committed.status === 'rejected') throw committed.reason;
      }, info);
      if (image === undefined || counted === undefined) throw new BerthError('internal', `snapshot ${id}: the commit gave no image`);
      const dirs = own.map((d) => d.name);
      const excluded = hostBindsOf(spec, sandbox.hostDir).filter((b) => b.kind !== 'own')
        .map((b) => `${b.target}: ${b.kind === 'workspace' ? 'the attached workspace' : 'a volume'} ${b.source} is the user's, not part of the snapshot`);
      const [tally, dirBytes] = counted;
      const meta: SnapshotMeta = { id, installation: this.host.installation, image, dirs, excluded, tally };
      await writeFile(path.join(dir, META), `${JSON.stringify(meta, null, 2)}\n`, { mode: 0o600 });
      const bytes = (await this.layerBytes(image)) + dirBytes + (await stat(path.join(dir, META))).blocks * 512;
      const tmpfs = own.filter((d) => d.source === undefined).map((d) => d.target);
      this.host.log.with({ ref: sandbox.ref }).debug(`snapshot ${id}: image ${image.slice(7, 19)}, dirs ${dirs.join(', ') || 'none'}` +
        `${tmpfs.length === 0 ? '' : `; tmpfs ${tmpfs.join(', ')} ${'root' in view ? 'copied on the host' : `through its archive (${view.unavailable})`}`}`);
      return { ref: `${id}@${image}`, bytes };
    } catch (err) {
      // By its id when the commit answered, else by its tag: a commit whose answer never came (its
      // request timed out) may still have made the image, and a value may be in it.
      await this.removeImage(image ?? `${SNAPSHOT_REPO}:${this.tagOf(id)}`, id)
        .catch((e: unknown) => this.host.log.warn(`could not remove the image of failed snapshot ${id}: ${String(e)}`));
      await removeSnapshotDir(this.root, id);
      throw err;
    }
  }

  async verify(ref: string): Promise<void> {
    await this.checked(ref);
  }

  /** `verify`, and the snapshot's record it read (`record`: that record, read already). */
  private async checked(ref: string, record?: Promise<SnapshotMeta>): Promise<SnapshotMeta> {
    const { id, image } = parseRef(ref);
    // Both read at once; the image's absence is told first.
    const [inspected, read] = await Promise.allSettled([this.host.request(`inspect image ${image}`, () => this.host.docker.getImage(image).inspect()), record ?? this.readMeta(id)]);
    if (inspected.status === 'rejected') {
      if (statusOf(inspected.reason) === 404) throw damagedSnapshot(id, `its image ${image.slice(7, 19)} is gone (removed outside berth)`);
      throw fromDockerError(this.host.docker, inspected.reason, `inspect image ${image}`);
    }
    if (read.status === 'rejected') throw read.reason;
    const [info, meta] = [inspected.value, read.value];
    const labels = info.Config?.Labels ?? {};
    if (labels[SNAPSHOT_LABEL] !== id || labels[LABEL.installation] !== this.host.installation) {
      throw damagedSnapshot(id, `image ${image.slice(7, 19)} is not this installation's snapshot ${id}`);
    }
    await checkCopies(id, meta.dirs.map((d) => ({ target: targetOf(d), dir: path.join(this.root, id, d), recorded: meta.tally?.[d] })));
    return meta;
  }

  async createFrom(
    spec: SandboxSpec<DockerSettings>, ref: string, replacing: { ref: string; hostDir: string | undefined } | undefined,
  ): Promise<Sandbox> {
    const { id, image } = parseRef(ref);
    if (spec.ephemeral) return this.ephemeralFrom(spec, ref, id, image, replacing);
    const meta = await this.checked(ref);
    const hostDir = hostDirFor(this.host.berthHome, spec);
    return this.host.withHostDir(spec, hostDir, () => (replacing === undefined
      ? this.persistentFrom(spec, id, image, meta, hostDir)
      : this.persistentReplacing(spec, id, image, meta, hostDir, replacing.ref)));
  }

  async remove(ref: string): Promise<void | 'kept'> {
    const { id, image } = parseRef(ref);
    const kept = await this.removeImage(image, id);
    await removeSnapshotDir(this.root, id);
    return kept ? 'kept' : undefined;
  }

  async list(): Promise<string[]> {
    let images: Dockerode.ImageInfo[];
    try {
      images = await this.host.request('list images', () => this.host.docker.listImages({
        filters: JSON.stringify({ label: [`${LABEL.installation}=${this.host.installation}`, SNAPSHOT_LABEL] }),
      }));
    } catch (err) {
      throw fromDockerError(this.host.docker, err, 'list images');
    }
    // By berth's own tags only (an image built FROM a snapshot inherits its labels, never its tags).
    // The "gone" tag too: a removed snapshot a fork's container still used is no snapshot, so no
    // record names it and the orphan pass removes it once that container is gone.
    return images
      .filter((i) => {
        const id = i.Labels?.[SNAPSHOT_LABEL] ?? '';
        const tags = i.RepoTags ?? [];
        return i.Labels?.[LABEL.installation] === this.host.installation && id !== ''
          && [this.tagOf(id), this.tagOf(`${GONE_PREFIX}${id}`)].some((t) => tags.includes(`${SNAPSHOT_REPO}:${t}`));
      })
      .map((i) => `${i.Labels[SNAPSHOT_LABEL] ?? ''}@${i.Id}`);
  }

  /**
   * The sandbox's own dirs a snapshot copies: a persistent one's host dirs (`source`), an
   * ephemeral one's tmpfs (no source). A workspace the user attached and the operator's volumes
   * are not its own.
   */
  private ownDirsOf(sandbox: Sandbox, spec: SandboxSpec<DockerSettings>): Array<{ name: OwnDirName; target: string; source: string | undefined }> {
    const binds = hostBindsOf(spec, sandbox.hostDir);
    const own: Array<{ name: OwnDirName; target: string; source: string | undefined }> = [];
    for (const { name, target } of OWN_DIRS) {
      const bind = binds.find((b) => b.target === target);
      if (bind === undefined || bind.kind === 'own') own.push({ name, target, source: bind?.source });
    }
    return own;
  }

  /** The host path of the paused container's tmpfs dir `target` under `view`, checked now (see host-view.ts). */
  private viewed(view: HostView, target: string): string {
    const seen = 'root' in view ? viewedDir(view, target) : view;
    if ('unavailable' in seen) throw new BerthError('transfer_failed', `cannot copy the sandbox's ${target} from this host: ${seen.unavailable}`);
    return seen.dir;
  }

  /**
   * Runs `fn` with no process of the container running, and lets them run again after: frozen by
   * berth where it manages the container's cgroup from this host (see freeze.ts), else paused by
   * the engine.
   */
  private async paused<T>(ref: string, fn: () => Promise<T>, info: Dockerode.ContainerInspectInfo): Promise<T> {
    const group = this.host.groupOf(info);
    if (group !== undefined) return whileFrozen(group, sandboxesRoot(this.host.berthHome), ref, 'snapshot the sandbox', fn);
    const container = this.host.docker.getContainer(ref);
    await this.host.request(`pause container ${ref.slice(0, 12)}`, (abortSignal) => container.pause({ abortSignal }));
    try {
      return await fn();
    } finally {
      await this.host.request(`unpause container ${ref.slice(0, 12)}`, (abortSignal) => container.unpause({ abortSignal }))
        .catch((e: unknown) => this.host.log.debug(`could not unpause ${ref.slice(0, 12)}: ${String(e)}`));
    }
  }

  /**
   * Commits the container, which the caller holds paused (after measuring its writable layer and
   * reading it for granted values in the same pause). The commit keeps the container's config;
   * its user goes back to the base image's (`baseUser`), so a sandbox made from it runs as its own
   * spec says (`User` unset means the image's). A claimed warm-pool container's pool labels are
   * emptied (an image's labels cannot be dropped; empty reads as none): a sandbox made from the
   * image is no pool's.
   */
  private async commit(ref: string, id: string, baseUser: string): Promise<string> {
    const changes = [
      `LABEL ${LABEL.managed}=true ${LABEL.installation}=${this.host.installation} ${SNAPSHOT_LABEL}=${id} ${POOL_LABEL.shape}="" ${POOL_LABEL.owner}=""`,
      `USER ${baseUser || '0:0'}`,
    ];
    try {
      const out = await this.host.request(`commit container ${ref.slice(0, 12)}`, (abortSignal) => this.host.docker.getContainer(ref).commit({
        repo: SNAPSHOT_REPO, tag: this.tagOf(id), pause: false, changes, comment: `berth snapshot ${id}`, abortSignal,
      })) as { Id: string };
      return out.Id;
    } catch (err) {
      throw fromDockerError(this.host.docker, err, `commit container ${ref.slice(0, 12)} as snapshot ${id}`);
    }
  }

  /**
   * Apparent bytes of the container's writable layer (what a commit writes out): measured on this
   * host where berth can read the layer, else as the engine counts it (`SizeRw`, also apparent).
   */
  private async writableBytes(ref: string, info: Dockerode.ContainerInspectInfo): Promise<number> {
    const upper = this.readableUpper(info);
    if (typeof upper === 'string') return apparentBytes(upper);
    // `size` is a query parameter of the engine's inspect that dockerode's types leave out.
    const inspectSized = (o: { size: boolean; abortSignal: AbortSignal }) => this.host.docker.getContainer(ref).inspect(o as Dockerode.ContainerInspectOptions) as Promise<{ SizeRw?: number }>;
    const sized = await this.host.request(`measure container ${ref.slice(0, 12)}`, (abortSignal) => inspectSized({ size: true, abortSignal }));
    return sized.SizeRw ?? 0;
  }

  /** The container's writable layer on this host where berth can read it, else why not. */
  private readableUpper(info: Dockerode.ContainerInspectInfo): string | { why: string } {
    const endpoint = describeEndpoint(this.host.docker);
    const upper = (info.GraphDriver?.Data as Record<string, string> | undefined)?.['UpperDir'];
    if (!endpoint.startsWith('unix://')) return { why: `the engine is not on this host (${endpoint})` };
    if (upper === undefined) return { why: `the engine's storage driver (${info.GraphDriver?.Name ?? 'unknown'}) does not show a writable layer berth can read` };
    if (!existsSync(upper)) return { why: `its writable layer ${upper} is not readable by berth` };
    return upper;
  }

  /** The container's writable layer on this host, where berth can read it; otherwise a snapshot with secrets is refused. */
  private upperDirOf(info: Dockerode.ContainerInspectInfo, id: string): string {
    const upper = this.readableUpper(info);
    if (typeof upper === 'string') return upper;
    throw new PolicyRefusedError(
      `snapshot ${id} refused: the sandbox holds granted secrets and berth cannot check that its files do not contain them (${upper.why}); ` +
        'snapshot a sandbox without secret grants, or run berth on the engine\'s host with overlay2',
    );
  }

  /** Bytes of the one layer the commit added (the first history entry). */
  private async layerBytes(image: string): Promise<number> {
    const history = await this.host.request(`history of ${image}`, () => this.host.docker.getImage(image).history()) as Array<{ Size?: number }>;
    return history[0]?.Size ?? 0;
  }

  /**
   * Removes a snapshot's image. One a container still uses (a fork, running or stopped) the engine
   * keeps: it is moved to a "gone" tag instead (tagged anew, then its snapshot tag removed, which
   * the engine allows while another tag holds the image), so it is no longer a snapshot, keeps
   * what the fork's next commit inspects, and is listed for the orphan pass, which removes it once
   * its last container is gone. Never forced: a forced untag deletes an image a stopped container
   * uses. True when the image was kept.
   */
  private async removeImage(image: string, id: string): Promise<boolean> {
    try {
      await this.host.request(`remove image ${image}`, (abortSignal) => this.host.docker.getImage(image).remove({ abortSignal }));
      return false;
    } catch (err) {
      const status = statusOf(err);
      if (status === 404) return false;
      if (status !== 409) throw fromDockerError(this.host.docker, err, `remove image ${image}`);
    }
    const gone = this.tagOf(`${GONE_PREFIX}${id}`);
    await this.host.request(`tag ${image} ${SNAPSHOT_REPO}:${gone}`, (abortSignal) => this.host.docker.getImage(image).tag({ repo: SNAPSHOT_REPO, tag: gone, abortSignal }))
      .catch((e: unknown) => { throw fromDockerError(this.host.docker, e, `tag ${image} as ${SNAPSHOT_REPO}:${gone}`); });
    const tagged = `${SNAPSHOT_REPO}:${this.tagOf(id)}`;
    await this.host.request(`untag ${tagged}`, (abortSignal) => this.host.docker.getImage(tagged).remove({ noprune: true, abortSignal }))
      .catch((e: unknown) => { if (statusOf(e) !== 404) throw fromDockerError(this.host.docker, e, `untag ${tagged}`); });
    return true;
  }

  private async readMeta(id: string): Promise<SnapshotMeta> {
    const file = path.join(this.root, id, META);
    const text = await readFile(file, 'utf8').catch(() => undefined);
    if (text === undefined) throw damagedSnapshot(id, `its files ${path.join(this.root, id)} are gone`);
    let meta: Partial<SnapshotMeta> | null;
    try {
      meta = JSON.parse(text) as Partial<SnapshotMeta> | null;
    } catch {
      throw damagedSnapshot(id, `${file} is not valid JSON`);
    }
    // What a fork reads of it: a file edited or cut short outside berth says so here, not as a TypeError later.
    const names: readonly string[] = OWN_DIRS.map((d) => d.name);
    if (typeof meta?.image !== 'string' || !Array.isArray(meta.dirs) || !meta.dirs.every((d) => names.includes(d))) {
      throw damagedSnapshot(id, `${file} does not say what the snapshot holds (its image and dirs)`);
    }
    return meta as SnapshotMeta;
  }

  /** `<installation>-<id>`: berth's and this installation's at a glance in `docker images`. */
  private tagOf(id: string): string {
    return `${this.host.installation.replace(/[^A-Za-z0-9_.-]/g, '').slice(0, 12)}-${id}`;
  }

  /**
   * An ephemeral sandbox: its own dirs are tmpfs, filled from the snapshot as it starts. The
   * snapshot is checked while the engine creates the container: a failed check, like a failed
   * fill, is a failed start (the container goes, the snapshot stays), and it is the error told.
   */
  private async ephemeralFrom(
    spec: SandboxSpec<DockerSettings>, ref: string, id: string, image: string, replacing: { ref: string; hostDir: string | undefined } | undefined,
  ): Promise<Sandbox> {
    const plan = await this.host.planFor(spec, undefined);
    const name = ephemeralName(spec.digest, randomBytes(4).toString('hex'));
    const record = this.readMeta(id);
    const fill = this.tmpfsArchiveOf(spec, id, (await record).dirs);
    const info = await this.host.createAndStart(spec, { ...plan, name, image, fill, ready: this.checked(ref, record) });
    const sandbox = this.host.sandboxOf(spec, info, undefined);
    if (replacing !== undefined) await this.host.removeSandbox(replacing.ref, replacing.hostDir);
    return sandbox;
  }

  /**
   * The snapshot's copies of a new sandbox's tmpfs dirs, as one archive it unpacks at `/` as it
   * starts (each entry named for its dir there), as its own user, before its warden answers. Not
   * by `cp` on the host as a snapshot copies them out: tmpfs pages count against the memory of the
   * process that writes them, so the fork's files would count against berth's memory and not the
   * sandbox's limit. Undefined when no dir of `dirs` is a tmpfs there.
   */
  private tmpfsArchiveOf(spec: SandboxSpec<DockerSettings>, id: string, dirs: readonly OwnDirName[]): (() => Readable) | undefined {
    const bound = hostBindsOf(spec, undefined);
    const tmpfs = dirs.filter((d) => !bound.some((b) => b.target === targetOf(d)));
    if (tmpfs.length === 0) return undefined;
    return () => packDirs(path.join(this.root, id), tmpfs.map((d) => ({ name: d, as: targetOf(d).slice(1) })));
  }

  /** A new persistent sandbox (a fork): its own dirs must be new, and are copies of the snapshot's. */
  private async persistentFrom(spec: SandboxSpec<DockerSettings>, id: string, image: string, meta: SnapshotMeta, hostDir: string): Promise<Sandbox> {
    const name = persistentName(spec.digest);
    const taken = await this.host.request(`inspect container ${name}`, () => this.host.docker.getContainer(name).inspect()).catch(() => undefined);
    const used = [];
    for (const d of OWN_DIRS) if (!(await isEmptyDir(path.join(hostDir, d.name)))) used.push(d.target);
    if (taken !== undefined || used.length > 0) {
      throw new BerthError('policy_refused', `sandbox "${spec.identity.key}" exists already (${taken !== undefined ? `container ${name}` : `files in ${used.join(', ')}`}); ` +
        'a snapshot makes only a new sandbox: restore it into that one, or remove it first (berth rm)');
    }
    const plan = await this.host.planFor(spec, hostDir);
    try {
      await this.fillOwnDirs(spec, id, meta, hostDir, hostDir, plan.runAs);
      const info = await this.host.createAndStart(spec, { ...plan, name, image });
      return this.host.sandboxOf(spec, info, hostDir);
    } catch (err) {
      for (const d of OWN_DIRS) await rm(path.join(hostDir, d.name), { recursive: true, force: true });
      throw err;
    }
  }

  /**
   * A restore of a persistent sandbox: the new dirs are copied beside the old ones, the old
   * container is stopped and set aside under another name, the dirs swapped by rename, and the new
   * container created under the sandbox's name. Only once it runs do the old container and dirs
   * go; on any failure they are put back and the old container started again.
   */
  private async persistentReplacing(
    spec: SandboxSpec<DockerSettings>, id: string, image: string, meta: SnapshotMeta, hostDir: string, oldRef: string,
  ): Promise<Sandbox> {
    const name = persistentName(spec.digest);
    const suffix = randomBytes(4).toString('hex');
    const stage = path.join(hostDir, `.restore-${suffix}`);
    const plan = await this.host.planFor(spec, hostDir);
    await this.fillOwnDirs(spec, id, meta, hostDir, stage, plan.runAs);
    const old = this.host.docker.getContainer(oldRef);
    const oldInfo = await this.host.request(`inspect container ${oldRef.slice(0, 12)}`, () => old.inspect()).catch(() => undefined);
    const swapped: string[] = [];
    try {
      if (oldInfo !== undefined) {
        await this.host.request(`stop container ${oldRef.slice(0, 12)}`, (abortSignal) => old.stop({ t: 3, abortSignal })).catch((e: unknown) => {
          if (statusOf(e) !== 304) throw e;
        });
        await this.host.request(`rename container ${oldRef.slice(0, 12)}`, (abortSignal) => old.rename({ name: `${name}-replaced-${suffix}`, abortSignal }));
      }
      for (const d of OWN_DIRS) {
        if (!existsSync(path.join(stage, d.name))) continue;
        await rename(path.join(hostDir, d.name), path.join(stage, `old-${d.name}`)).catch((e: NodeJS.ErrnoException) => { if (e.code !== 'ENOENT') throw e; });
        await rename(path.join(stage, d.name), path.join(hostDir, d.name));
        swapped.push(d.name);
      }
      const info = await this.host.createAndStart(spec, { ...plan, name, image });
      if (oldInfo !== undefined) await this.host.removeSandbox(oldInfo.Id, undefined);
      await rm(stage, { recursive: true, force: true });
      return this.host.sandboxOf(spec, info, hostDir);
    } catch (err) {
      await this.putBack(hostDir, stage, swapped, name, oldInfo).catch((e: unknown) => this.host.log.debug(`could not put sandbox ${name} back after a failed restore: ${String(e)}`));
      throw err;
    }
  }

  private async putBack(hostDir: string, stage: string, swapped: readonly string[], name: string, oldInfo: Dockerode.ContainerInspectInfo | undefined): Promise<void> {
    for (const d of swapped) {
      await rm(path.join(hostDir, d), { recursive: true, force: true });
      await rename(path.join(stage, `old-${d}`), path.join(hostDir, d)).catch((e: NodeJS.ErrnoException) => { if (e.code !== 'ENOENT') throw e; });
    }
    await rm(stage, { recursive: true, force: true });
    if (oldInfo === undefined) return;
    const old = this.host.docker.getContainer(oldInfo.Id);
    await this.host.request(`rename container ${oldInfo.Id.slice(0, 12)}`, (abortSignal) => old.rename({ name, abortSignal }));
    if (oldInfo.State.Running) await this.host.request(`start container ${oldInfo.Id.slice(0, 12)}`, (abortSignal) => old.start({ abortSignal }));
  }

  /** The new sandbox's own dirs under `into`: the snapshot's copies of those it binds, empty ones for the rest. */
  private async fillOwnDirs(
    spec: SandboxSpec<DockerSettings>, id: string, meta: SnapshotMeta, hostDir: string, into: string, runAs: { uid: number; gid: number } | undefined,
  ): Promise<void> {
    await this.host.makeHostDirs(into, runAs);
    for (const bind of hostBindsOf(spec, hostDir).filter((b) => b.kind === 'own')) {
      const d = OWN_DIRS.find((o) => o.target === bind.target)?.name;
      if (d === undefined || !meta.dirs.includes(d)) continue;
      await rm(path.join(into, d), { recursive: true, force: true });
      await copyTree(path.join(this.root, id, d), path.join(into, d));
    }
  }
}

function targetOf(d: OwnDirName): string {
  return d === 'home' ? HOME : WORKSPACE;
}

function parseRef(ref: string): { id: string; image: string } {
  const m = /^([A-Za-z0-9][A-Za-z0-9_.-]{0,63})@(sha256:[0-9a-f]{64})$/.exec(ref);
  if (m === null) throw new BerthError('invalid_ref', `"${ref}" is not a docker snapshot ref (<id>@sha256:<image id>); the record belongs to another backend`);
  return { id: m[1] as string, image: m[2] as string };
}

