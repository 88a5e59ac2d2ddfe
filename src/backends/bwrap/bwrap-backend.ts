import { createHash, randomBytes } from 'node:crypto';
import { mkdirSync, readdirSync } from 'node:fs';
import { basename, dirname, resolve } from 'node:path';
import { BackendUnavailableError, isBerthError, PolicyRefusedError, SandboxNotFoundError } from '../../errors.js';
import { Logger } from '../../logging/logger.js';
import { EGRESS_CA_DIR, networkOf, type Backend, type ManagedSandbox, type PoolShape, type Sandbox, type SandboxSpec, type WarmCapability } from '../backend.js';
import { pidLevelOf } from '../cgroups/cgroup-host.js';
import { HostCgroups } from '../cgroups/host-cgroups.js';
import type { SandboxCgroups } from '../cgroups/sandbox-cgroups.js';
import { installBwrapGuard, keepBwrapGuard } from '../../egress/bwrap-guard.js';
import type { GuardStatus } from '../../egress/host-guard.js';
import { writeEgressCa } from '../plumbing/egress-ca.js';
import { FifoPool, STALE_FIFO_MS, sweepStaleFifos } from '../plumbing/fifo-pool.js';
import { ProcessSandbox } from '../plumbing/process-sandbox.js';
import { knownRootsFile, readKnownRoots, rememberRoot } from './known-roots.js';
import { placeSandbox, removeSandbox, type SandboxPlacement } from './placement.js';
import { probeBwrap, type BwrapHost } from './probe.js';
import { addHolder, claimMeta, dropHolder, isRealDir, killHolders, liveHolders, pidNsOf, readMeta, writeMeta, type SandboxMeta } from './records.js';
import { startSandbox, type BwrapSandbox } from './sandbox.js';
import { prepareRoot, rootLayout, sandboxDirs } from './sandbox-dirs.js';
import { BwrapSandboxHandle } from './sandbox-handle.js';
import { seccompProgram } from './seccomp.js';
import { defaultBwrapRoot, type BwrapSettings } from './settings.js';
import { claimUid, releaseStaleClaims, releaseUid } from './uid-claims.js';
import { BwrapSnapshots } from './snapshots.js';
import type { SandboxDirs } from './layout.js';

/** Chars of the sandbox's readable dir name kept in its bwrap dir name (the digest follows). */
const STEM_CHARS = 60;

/** The one sandbox of a bwrap dir that this process runs. */
interface Running {
  sb: BwrapSandbox;
  handle: BwrapSandboxHandle;
  placement: SandboxPlacement;
  /** Its processes' cgroup, where berth may make them. */
  groups: SandboxCgroups | undefined;
}

/**
 * `backend: bwrap`: each sandbox is a bubblewrap process tree in its own user, mount, pid, ipc,
 * uts, net and cgroup namespaces, as an unprivileged host uid of its own (berth as root), with
 * the syscall filter, over dirs under the sandbox root (see sandbox-dirs.ts).
 *
 * A sandbox is its dirs; the namespaces are the process that runs over them. Each berth process
 * runs its own bwrap over a persistent sandbox's dirs (a bwrap's init loop answers only the
 * process that started it), so two processes share a persistent sandbox's files, not its
 * processes. Removing a sandbox ends every bwrap over its dirs, whichever process started it:
 * each one is recorded in the dir by the host pid of its pid 1 and that pid's namespace.
 */
/** Why the guard cannot hold when berth is not root (no rule may single out berth's own uid). */
const NOT_ROOT = 'berth is not root, so its bwrap sandboxes run as its own uid';

export class BwrapBackend implements Backend<BwrapSettings> {
  readonly name = 'bwrap' as const;
  private readonly running = new Map<string, Running>();
  private readonly starting = new Map<string, Promise<Running>>();
  /**
   * The FIFO pool of each sandbox dir this process started, kept while the dir is: a hibernated
   * or stopped sandbox's next start takes the sets its last one left instead of making a batch
   * (one host process less on the way to its first command), and no start leaves its unused sets
   * behind in the run dir.
   */
  private readonly fifoPools = new Map<string, FifoPool>();
  private readonly hosts = new Map<string, Promise<BwrapHost>>();
  private readonly preparedRoots = new Set<string>();
  private readonly warned = new Set<string>();
  private readonly log: Logger;
  /** Warm-pool sandboxes this process made and nobody claimed yet, by the sandbox it handed out. */
  private readonly prepared = new WeakMap<Sandbox, Running>();
  /** Where its sandboxes' cgroups go, read at the first start (see backends/cgroups). */
  private cgroups: HostCgroups | { unavailable: string } | undefined;
  private guard: Promise<void> | undefined;
  /** The uid range the host guard was installed for (the first host-network sandbox's settings). */
  private guardedUids: BwrapSettings['uids'] | undefined;

  /**
   * Warm pools: a sandbox started (dirs, uid, namespaces) before a session asks; a claim relabels
   * its dir with the identity (its meta.json replaced at once), so it is then an ordinary
   * ephemeral sandbox of that identity.
   */
  readonly warm: WarmCapability<BwrapSettings> = {
    shapeOf: (section) => ({ digest: createHash('sha256').update(JSON.stringify({ bwrap: section })).digest('hex'), perTenant: false }),
    prepare: (shape) => this.preparePooled(shape),
    claim: async (prepared, spec) => this.claimPooled(prepared, spec),
  };

  /** Snapshots: copies of a sandbox's own dirs (snapshots.ts). */
  readonly snapshots: BwrapSnapshots;

  constructor(private readonly opts: { berthHome: string; installation: string; log?: Logger }) {
    this.log = opts.log ?? Logger.silent();
    this.snapshots = new BwrapSnapshots({
      berthHome: opts.berthHome, installation: opts.installation, log: this.log,
      dirsOf: (ref) => this.located(ref).dirs,
      newName: (spec) => this.nameFor(spec),
      startFilled: (spec, name, fill) => this.startFilled(spec, name, fill),
      startExisting: async (spec, name) => new ProcessSandbox((await this.start(spec, await this.hostFor(spec.section), spec.section, this.rootOf(spec.section), name, false)).handle),
      stopAll: async (ref) => {
        const { dirs } = this.located(ref);
        await this.running.get(dirs.root)?.sb.stop();
        if (isRealDir(dirs.root)) await killHolders(dirs.root);
      },
      removeSandbox: (ref) => this.remove(ref, undefined),
    });
  }

  /** A new sandbox's dir name: the identity's for a persistent one, unique per creation for an ephemeral one. */
  private nameFor(spec: SandboxSpec<BwrapSettings>): string {
    // A persistent name ends in 24 hex with no "-" among them, an ephemeral one in 12: the two never meet.
    return spec.ephemeral ? `${stemOf(spec)}-${randomBytes(6).toString('hex')}` : `${stemOf(spec)}-${spec.digest.slice(0, 24)}`;
  }

  /**
   * A new sandbox whose dirs `fill` fills before it starts (a snapshot's copies); refused if its dir
   * exists, and removed whole (dirs and uid) when anything fails.
   */
  private async startFilled(
    spec: SandboxSpec<BwrapSettings>, name: string, fill: (dirs: SandboxDirs, owner: { uid: number; gid: number } | undefined) => Promise<void>,
  ): Promise<Sandbox> {
    const s = spec.section;
    const host = await this.hostFor(s);
    const root = this.rootOf(s);
    const planned = sandboxDirs(root, name);
    if (isRealDir(planned.root)) {
      throw new PolicyRefusedError(`sandbox "${spec.identity.key}" exists already (${planned.root}); a snapshot makes only a new sandbox: restore it into that one, or remove it first (berth rm)`);
    }
    mkdirSync(planned.root, { mode: 0o711, recursive: true });
    try {
      writeMeta(planned.root, { installation: this.opts.installation, digest: spec.digest, ephemeral: spec.ephemeral, name: spec.dirName });
      const placement = placeSandbox({ root, name, range: s.uids, attached: spec.mount ?? undefined });
      await fill(placement.dirs, placement.user);
      return new ProcessSandbox((await this.start(spec, host, s, root, name, false)).handle);
    } catch (err) {
      await this.dropFifos(planned.root);
      removeSandbox(root, planned);
      throw err;
    }
  }

  /** The probe (see probe.ts): fails closed with what is missing and the fix; never falls back to the host. */
  async check(s: BwrapSettings): Promise<void> {
    if (!s.seccomp) this.warnOnce('bwrap.seccomp is false: sandboxes run WITHOUT the syscall filter (mount, ptrace, keyctl, bpf, io_uring and the rest of its list are open to them); set bwrap.seccomp: true unless this kernel cannot load it');
    if (s.network === 'host') this.warnOnce('bwrap.network is host: sandboxes share this host\'s network namespace (its loopback services included)');
    await this.hostFor(s);
  }

  async ensure(spec: SandboxSpec<BwrapSettings>, knownRef: string | undefined): Promise<Sandbox> {
    const s = spec.section;
    const host = await this.hostFor(s);
    const root = this.rootOf(s);
    let name: string;
    let recreated = false;
    if (!spec.ephemeral) {
      name = this.nameFor(spec);
      recreated = knownRef !== undefined && readMeta(sandboxDirs(root, name).root) === undefined;
    } else if (knownRef !== undefined && this.isOurs(root, knownRef, spec.digest)) {
      name = basename(knownRef);
    } else {
      // An ephemeral sandbox is found again only by its recorded ref: without one it is a new one.
      recreated = knownRef !== undefined;
      name = this.nameFor(spec);
    }
    const dir = sandboxDirs(root, name).root;
    const live = this.running.get(dir);
    if (live !== undefined && !live.sb.gone) return new ProcessSandbox(live.handle);
    let pending = this.starting.get(dir);
    if (pending === undefined) {
      pending = this.start(spec, host, s, root, name, recreated).finally(() => this.starting.delete(dir));
      this.starting.set(dir, pending);
    }
    return new ProcessSandbox((await pending).handle);
  }

  private async preparePooled(shape: PoolShape<BwrapSettings>): Promise<Sandbox> {
    const s = shape.section;
    const host = await this.hostFor(s);
    const root = this.rootOf(s);
    const spec: SandboxSpec<BwrapSettings> = {
      identity: { installation: this.opts.installation, tenant: '', profile: undefined, key: `pool:${shape.digest.slice(0, 12)}` },
      digest: shape.digest, dirName: 'pool', ephemeral: true, mount: null, rule: 'pool', section: shape.section,
    };
    const name = `pool-${shape.digest.slice(0, 12)}-${randomBytes(6).toString('hex')}`;
    const running = await this.start(spec, host, s, root, name, false, {
      installation: this.opts.installation, digest: '', ephemeral: true, name: 'pool', pool: { shape: shape.digest, owner: shape.owner },
    });
    const sandbox = new ProcessSandbox(running.handle);
    this.prepared.set(sandbox, running);
    return sandbox;
  }

  /** Nothing inside the sandbox is asked: the broker names the identity, berth's own dir records it. */
  private claimPooled(prepared: Sandbox, spec: SandboxSpec<BwrapSettings>): Sandbox {
    const running = this.prepared.get(prepared);
    if (running === undefined) throw new PolicyRefusedError('a warm-pool claim was given a sandbox this bwrap backend did not prepare');
    this.prepared.delete(prepared);
    if (!spec.ephemeral || spec.mount !== null) throw new PolicyRefusedError(`sandbox "${spec.identity.key}" is not ephemeral without a mount; it cannot come from a warm pool`);
    if (running.sb.gone) throw new SandboxNotFoundError(`the warm-pool sandbox ${prepared.ref} is gone`);
    const dir = running.placement.dirs.root;
    claimMeta(dir, { installation: this.opts.installation, digest: spec.digest, ephemeral: true, name: spec.dirName });
    const handle = new BwrapSandboxHandle(spec, running.sb, running.placement, false, spec.section.maxProcesses, running.groups);
    const claimed: Running = { ...running, handle };
    this.running.set(dir, claimed);
    this.log.with({ key: spec.identity.key, ref: dir }).debug('claimed from the warm pool');
    return new ProcessSandbox(handle);
  }

  private async start(
    spec: SandboxSpec<BwrapSettings>, host: BwrapHost, s: BwrapSettings, root: string, name: string, recreated: boolean,
    meta: SandboxMeta = { installation: this.opts.installation, digest: spec.digest, ephemeral: spec.ephemeral, name: spec.dirName },
  ): Promise<Running> {
    // Labelled before anything else is made in it: a berth that dies half way leaves a dir the reapers find.
    const planned = sandboxDirs(root, name);
    const fresh = !isRealDir(planned.root);
    mkdirSync(planned.root, { mode: 0o711, recursive: true });
    let sb: BwrapSandbox | undefined;
    let placement;
    let entering: Promise<void> | undefined;
    let monitorPid: number | undefined;
    try {
      writeMeta(planned.root, meta);
      placement = placeSandbox({ root, name, range: s.uids, attached: spec.mount ?? undefined });
      const network = networkOf(spec);
      if (network === 'host') await this.installHostGuard(s);
      const caDir = spec.egress?.ca === undefined ? undefined : await writeEgressCa(root, spec.egress.ca);
      sb = await startSandbox({
        ...host,
        // bwrap's move into the sandbox's cgroup starts at once: the kernel's wait for the first
        // move overlaps bwrap's own set-up instead of following it.
        spawned: (pid) => {
          monitorPid = pid;
          entering = this.enterGroupEarly(pid, spec);
        },
        // The egress proxy's CA, where the sandbox's CA variables point (read-only).
        systemPaths: caDir === undefined ? host.systemPaths : [...host.systemPaths, { kind: 'bind', source: caDir, path: EGRESS_CA_DIR }],
        dirs: placement.dirs,
        user: placement.user,
        workspace: placement.workspace,
        // An allowlist or no network: loopback only (berth's proxy listens there), whatever bwrap.network says.
        network,
        fifos: this.fifosOf(placement),
        seccomp: s.seccomp ? seccompProgram() : undefined,
        hostname: `berth-${spec.digest.slice(0, 12)}`,
        tmpSizeBytes: s.tmpSizeMb * 1024 * 1024,
        maxProcesses: s.maxProcesses,
      });
      addHolder(planned.root, sb.hostPid, sb.pidNs ?? '');
    } catch (err) {
      await sb?.stop();
      await entering;
      if (monitorPid !== undefined && this.cgroups instanceof HostCgroups) await this.cgroups.remove(groupName(monitorPid));
      // A sandbox made for this call goes with its failure (its uid too); an existing one keeps its files.
      if (fresh) {
        await this.dropFifos(planned.root);
        removeSandbox(root, planned);
      }
      throw err;
    }
    const dir = placement.dirs.root;
    const hostPid = sb.hostPid;
    const groups = await this.groupsOf(sb, spec, entering);
    const handle = new BwrapSandboxHandle(spec, sb, placement, recreated, s.maxProcesses, groups);
    const running = { sb, handle, placement, groups };
    this.running.set(dir, running);
    void sb.exited.then(() => {
      dropHolder(dir, hostPid);
      if (this.cgroups instanceof HostCgroups) void this.cgroups.remove(groupName(sb.monitorPid));
      if (this.running.get(dir)?.sb === sb) this.running.delete(dir);
    });
    this.log.with({ key: spec.identity.key, ref: dir }).debug(`started (host pid ${hostPid}, uid ${placement.user?.uid ?? 'berth'})`);
    return running;
  }

  /**
   * The host guard of sandboxes on the host's network (egress/bwrap-guard.ts): no host service, no
   * link-local address, no docker sandbox, by owner match on berth's uid range. Installed once per
   * process before the first such sandbox starts; where berth cannot (not root: its sandboxes then
   * run as berth's own uid, which no rule may single out) the debug log says so.
   */
  private installHostGuard(s: BwrapSettings): Promise<void> {
    this.guardedUids ??= s.uids;
    this.guard ??= (async () => {
      const status = process.getuid?.() === 0 ? await installBwrapGuard(s.uids) : { enforced: false, reason: NOT_ROOT };
      if (!status.enforced) this.log.warn(`host guard not enforced: ${status.reason ?? 'unknown'}; sandboxes on the host network may reach this host's services`);
    })();
    return this.guard;
  }

  /** Applies once a sandbox on the host's network started in this process (the others have no route to the host). */
  async hostGuard(repair: boolean): Promise<GuardStatus | undefined> {
    if (this.guardedUids === undefined) return undefined;
    if (process.getuid?.() !== 0) return { enforced: false, reason: NOT_ROOT };
    const status = await keepBwrapGuard(this.guardedUids, repair);
    if (status.restored.length > 0) this.log.warn(`host guard rules were missing and are put back: ${status.restored.join('; ')}`);
    return { enforced: status.enforced, ...(status.reason === undefined ? {} : { reason: status.reason }) };
  }

  /** The host's cgroups for berth, probed at the first start of this process. */
  private hostCgroups(): HostCgroups | { unavailable: string } {
    if (this.cgroups === undefined) {
      this.cgroups = HostCgroups.probe(this.opts.installation, this.log);
      // The first start of this process: sandbox cgroups a crashed berth left empty go.
      if (this.cgroups instanceof HostCgroups) this.cgroups.reap();
    }
    return this.cgroups;
  }

  /**
   * Makes the cgroup of a sandbox whose bwrap was just spawned and moves bwrap itself into it
   * (named after bwrap's pid, the one known this early), off the event loop. Only a head start:
   * `groupsOf` decides once the sandbox runs.
   */
  private async enterGroupEarly(monitorPid: number, spec: SandboxSpec<BwrapSettings>): Promise<void> {
    const cgroups = this.hostCgroups();
    if (!(cgroups instanceof HostCgroups)) return;
    try {
      await cgroups.sandbox(groupName(monitorPid), 1).admitAsync(monitorPid);
    } catch (err) {
      this.log.with({ key: spec.identity.key }).debug(`the sandbox's cgroup could not be made early: ${String(err)}`);
    }
  }

  /**
   * The cgroup of the sandbox that just started, with its processes in it (bwrap's pid 1 and the
   * init loop; nothing else runs before the first spawn), so every later process of the sandbox is
   * in it or in a command's group below it; undefined, and its commands are found by tags, where
   * berth may not make cgroups. The moves run off the event loop, after the early one (`entering`).
   */
  private async groupsOf(sb: BwrapSandbox, spec: SandboxSpec<BwrapSettings>, entering: Promise<void> | undefined): Promise<SandboxCgroups | undefined> {
    const log = this.log.with({ key: spec.identity.key });
    const cgroups = this.hostCgroups();
    if (!(cgroups instanceof HostCgroups)) {
      log.debug(`commands are found by tags, not cgroups: ${cgroups.unavailable}`);
      return undefined;
    }
    try {
      await entering;
      const groups = cgroups.sandbox(groupName(sb.monitorPid), pidLevelOf(sb.hostPid) ?? 1);
      const members = readdirSync('/proc').filter((d) => /^\d+$/.test(d) && pidNsOf(Number(d)) === sb.pidNs).map(Number);
      const admitted = await Promise.all(members.map((pid) => groups.admitAsync(pid)));
      return members.length > 0 && admitted.every(Boolean) ? groups : undefined;
    } catch (err) {
      log.debug(`commands are found by tags, not cgroups: ${String(err)}`);
      return undefined;
    }
  }

  /** Ends every process over the sandbox's dirs (any berth process's), then removes the dirs and frees its uid. */
  async remove(ref: string, _hostDir: string | undefined): Promise<void> {
    const { root, dirs } = this.located(ref);
    const meta = readMeta(dirs.root);
    if (meta !== undefined && meta.installation !== this.opts.installation) {
      throw new PolicyRefusedError(`refusing to remove ${dirs.root}: it is a sandbox of another berth installation (${meta.installation})`);
    }
    await this.running.get(dirs.root)?.sb.stop();
    if (isRealDir(dirs.root)) await killHolders(dirs.root);
    await this.dropFifos(dirs.root);
    removeSandbox(root, dirs);
    this.log.with({ ref }).debug('removed');
  }

  /**
   * The sandbox's FIFO pool (see `fifoPools`), made at its first start in this process, when the
   * sets an earlier process made ahead and never used are swept from its run dir (a set another
   * berth process running the same sandbox took is younger than that).
   */
  private fifosOf(placement: SandboxPlacement): FifoPool {
    const { dirs, user } = placement;
    let pool = this.fifoPools.get(dirs.root);
    // The dir was removed and made again meanwhile (by another berth process) under another uid:
    // this pool's sets are gone with the old dir, and the ones it would make would be the old uid's.
    if (pool !== undefined && (pool.owner?.uid !== user?.uid || pool.owner?.gid !== user?.gid)) {
      void pool.close();
      pool = undefined;
    }
    if (pool === undefined) {
      sweepStaleFifos(dirs.run, STALE_FIFO_MS);
      pool = new FifoPool(dirs.run, user);
      this.fifoPools.set(dirs.root, pool);
    }
    return pool;
  }

  /** Forgets a sandbox dir's FIFO pool once no batch of it is being made (the dir goes next). */
  private async dropFifos(dir: string): Promise<void> {
    const pool = this.fifoPools.get(dir);
    if (pool === undefined) return;
    this.fifoPools.delete(dir);
    await pool.close();
  }

  async reapIdleGroups(): Promise<void> {
    if (this.cgroups instanceof HostCgroups) this.cgroups.reap();
  }

  /** Ends this process's bwrap over the sandbox (its files stay; the next call starts it again). */
  async stop(ref: string): Promise<void> {
    await this.running.get(resolve(ref))?.sb.stop();
  }

  /** This installation's sandboxes in every root it has used, by the labels each dir keeps. */
  async listManaged(): Promise<ManagedSandbox[]> {
    const out: ManagedSandbox[] = [];
    for (const root of readKnownRoots(this.opts.berthHome)) {
      const sandboxes = rootLayout(root).sandboxes;
      let names: string[];
      try {
        names = readdirSync(sandboxes);
      } catch {
        continue;
      }
      for (const name of names) {
        if (name.startsWith('.')) continue;
        const dir = resolve(sandboxes, name);
        const meta = readMeta(dir);
        if (meta === undefined || meta.installation !== this.opts.installation) continue;
        out.push({
          ref: dir, name, digest: meta.digest, ephemeral: meta.ephemeral, running: liveHolders(dir).length > 0, ...(meta.pool === undefined ? {} : { pool: meta.pool }),
        });
      }
    }
    return out;
  }

  /** Ends every sandbox this process runs (their files stay). */
  async close(): Promise<void> {
    await Promise.all([...this.starting.values()].map((p) => p.catch(() => undefined)));
    await Promise.all([...this.running.values()].map((r) => r.sb.stop()));
    this.running.clear();
    await Promise.all([...this.fifoPools.keys()].map((dir) => this.dropFifos(dir)));
    if (this.cgroups instanceof HostCgroups) await this.cgroups.close();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  /** The probed host for these settings, once per (binary, root, filter) and process. */
  private hostFor(s: BwrapSettings): Promise<BwrapHost> {
    const root = this.rootOf(s);
    const key = JSON.stringify([s.path, root, s.seccomp, s.uids]);
    let host = this.hosts.get(key);
    if (host === undefined) {
      host = this.probe(s, root);
      this.hosts.set(key, host);
      host.catch(() => this.hosts.delete(key));
    }
    return host;
  }

  private async probe(s: BwrapSettings, root: string): Promise<BwrapHost> {
    const seccomp = s.seccomp ? seccompProgram() : undefined;
    const claims = rootLayout(root).uids;
    releaseStaleClaims(claims, rootLayout(root).sandboxes);
    if (process.getuid?.() !== 0) return probeBwrap({ bwrapPath: s.path, root, user: undefined, seccomp });
    // The probe runs as a uid of the range, claimed like a sandbox's, so no sandbox has it meanwhile.
    const owner = `${rootLayout(root).sandboxes}/.probe-claim-${randomBytes(6).toString('hex')}`;
    const uid = claimUid(claims, s.uids, owner);
    try {
      return await probeBwrap({ bwrapPath: s.path, root, user: { uid, gid: uid }, seccomp });
    } finally {
      releaseUid(claims, uid, owner);
    }
  }

  /** The configured root, prepared and remembered (so `listManaged` finds it without a config). */
  private rootOf(s: BwrapSettings): string {
    const root = resolve(s.root ?? defaultBwrapRoot());
    if (!this.preparedRoots.has(root)) {
      try {
        prepareRoot(root);
      } catch (err) {
        if (isBerthError(err)) throw err;
        throw new BackendUnavailableError(
          `the bwrap sandbox root ${root} cannot be made or used (${err instanceof Error ? err.message : String(err)}); ` +
            'set bwrap.root to a dir berth\'s user owns (or may create), outside BERTH_HOME',
          { cause: err },
        );
      }
      rememberRoot(this.opts.berthHome, root);
      this.preparedRoots.add(root);
    }
    return root;
  }

  /** `ref` is a sandbox dir of a root this installation uses, labelled with `digest` and this installation. */
  private isOurs(root: string, ref: string, digest: string): boolean {
    if (dirname(resolve(ref)) !== rootLayout(root).sandboxes) return false;
    const meta = readMeta(resolve(ref));
    return meta !== undefined && meta.digest === digest && meta.installation === this.opts.installation;
  }

  /** The root and dirs of a recorded ref; a ref outside every root this installation used is refused. */
  private located(ref: string): { root: string; dirs: ReturnType<typeof sandboxDirs> } {
    const abs = resolve(ref);
    const root = readKnownRoots(this.opts.berthHome).find((r) => dirname(abs) === rootLayout(r).sandboxes);
    if (root === undefined) {
      throw new PolicyRefusedError(
        `refusing to remove "${abs}": this installation's bwrap sandboxes live under the roots listed in ${knownRootsFile(this.opts.berthHome)} ` +
          '(is the state store from another BERTH_HOME?)',
      );
    }
    return { root, dirs: sandboxDirs(root, basename(abs)) };
  }

  private warnOnce(message: string): void {
    if (this.warned.has(message)) return;
    this.warned.add(message);
    this.log.debug(`warning: ${message}`);
    process.emitWarning(message, { code: 'BERTH_BWRAP' });
  }
}

/** The cgroup of the sandbox whose bwrap is host process `monitorPid` (unique among running sandboxes). */
function groupName(monitorPid: number): string {
  return `sb-${monitorPid}`;
}

/** The readable part of a sandbox's bwrap dir name. */
function stemOf(spec: SandboxSpec<BwrapSettings>): string {
  return spec.dirName.slice(0, STEM_CHARS);
}
