import { randomBytes } from 'node:crypto';
import { createWriteStream } from 'node:fs';
import { chmod, chown, mkdir, rm } from 'node:fs/promises';
import path from 'node:path';
import type { Duplex } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import type Dockerode from 'dockerode';
import { BackendUnavailableError, BerthError, ConfigError, PolicyRefusedError, TimeoutError } from '../../errors.js';
import { networkOf, type Backend, type Lease, type ManagedSandbox, type PoolShape, type Sandbox, type SandboxSpec, type SandboxUsage, type WarmCapability } from '../backend.js';
import {
  LABEL,
  WORKSPACE,
  createOptions,
  type CreatePlanInput,
  FILL_ARCHIVE,
  type StartPlan,
  ephemeralName,
  expectedWorkspaceSource,
  hostDirFor,
  persistentName,
  sandboxesRoot,
  volumesOf,
  WARDEN_LABEL,
} from './container-spec.js';
import { watchWardenStart } from './spawn.js';
import {
  bounded,
  defaultDocker,
  describeEndpoint,
  endedAtStart,
  ENGINE_REQUEST_TIMEOUT_MS,
  engineInfo,
  engineMessage,
  fromDockerError,
  imageMissingError,
  inspectImage,
  PING_TIMEOUT_MS,
  statusOf,
  unavailableError,
} from './engine.js';
import { DockerSandboxHandle } from './sandbox-handle.js';
import { containerGroups } from './container-groups.js';
import { dropFrozenMarker, thawLeftFrozen } from './freeze.js';
import { probeCgroupHost, type CgroupHostProbe } from '../cgroups/cgroup-host.js';
import type { SandboxCgroups } from '../cgroups/sandbox-cgroups.js';
import { ProcessSandbox } from '../plumbing/process-sandbox.js';
import { removeUnder } from '../plumbing/remove-under.js';
import { capabilitiesFromInfo, LIMIT_DEFAULTS, planLimits, type EngineCapabilities, type LimitPlan } from './limits.js';
import { diskBreachOf } from './disk-usage.js';
import { describeDiskBound, isStorageOptRefusal } from './disk-bound.js';
import { SandboxDisks } from './sandbox-disk.js';
import { installDockerGuard, keepDockerGuard } from '../../egress/docker-guard.js';
import type { GuardStatus } from '../../egress/host-guard.js';
import { writeEgressCa } from '../plumbing/egress-ca.js';
import { isNetworkGone, localLease, SandboxNetworks } from './networks.js';
import { assertRunsAs, runAsFor } from './run-as.js';
import { containerUsageWithDisk } from './usage.js';
import { POOL_LABEL } from '../labels.js';
import { dockerShapeOf, poolLabels, poolName, poolSpec } from './pool-shape.js';
import { Logger } from '../../logging/logger.js';
import type { DockerSettings } from './settings.js';
import { DockerSnapshots } from './snapshots.js';
import { FifoPool, STALE_FIFO_MS, sweepStaleFifos } from '../plumbing/fifo-pool.js';
import { makeStdioDir, removeStdioDir, STDIO_LABEL, sweepStdioDirs, usableStdioDir } from './stdio-dir.js';

const STOP_TIMEOUT_SECONDS = 3;
/** Inspect/create rounds when racing another process for a persistent name. */
const ADOPT_ATTEMPTS = 20;
/** Create rounds when a reaper (another process's) removed the network between join and start. */
const NETWORK_ATTEMPTS = 3;
/**
 * How long a start waits for the resident warden's first line (from the attach before the start);
 * past it the inspect alone decides. Bash prints it at once; a busy engine may take seconds.
 */
const WARDEN_LINE_BOUND_MS = 20_000;
/** The same for a sandbox filled as it starts (its archive unpacked first); past it the start failed. */
const FILL_BOUND_MS = 300_000;
/** After a warden's output ended at its start: inspects until the engine shows the exit (~2 s at most). */
const ENDED_POLLS = 40;
const ENDED_POLL_MS = 50;
/** Stats requests in flight at once for `usage`. */
const USAGE_PARALLEL = 4;
/** A stdio dir no container names is removed once this old (a container may be being made for a younger one). */
const STALE_STDIO_DIR_MS = 10 * 60_000;

export interface DockerBackendOptions {
  /** Engine client; defaults to `DOCKER_HOST` or the default socket. */
  docker?: Dockerode;
  /** This installation's id: every container is labelled with it and only those are touched. */
  installation: string;
  berthHome: string;
  /** Debug and warning lines (`berth:docker`); never given secret values. */
  log?: Logger;
  /**
   * The uid/gid berth runs as (defaults to this process's): what `runAsHostUser` runs sandboxes
   * as, and the owner of berth's own per-sandbox dirs.
   */
  hostUser?: { uid: number; gid: number };
  /**
   * A lease across the processes of this installation (the broker passes one kept in its state
   * store), so racing creates of a tenant network end with one network. Default: this process only.
   */
  lease?: Lease;
}

/**
 * Sandboxes as containers on a Docker Engine, through its API only.
 *
 * @example
 * const backend = new DockerBackend({ installation: 'inst-1', berthHome: '/home/ana/.berth' });
 * await backend.check(settings);
 * const sandbox = await backend.ensure(spec, undefined);
 * const shell = await sandbox.openShell({ env: {}, cwd: sandbox.defaultCwd }); // through its handle's spawn
 */
/** Why the guard cannot hold for an engine on another machine (its rules would be that host's). */
const REMOTE_ENGINE = 'the docker engine is not on this host';

export class DockerBackend implements Backend<DockerSettings> {
  readonly name = 'docker' as const;

  private readonly docker: Dockerode;
  private readonly installation: string;
  private readonly berthHome: string;
  private readonly logger: Logger;
  private readonly log: (msg: string) => void;
  private readonly hostUser: { uid: number; gid: number } | undefined;
  private capabilities: Promise<EngineCapabilities> | undefined;
  /** This host's cgroups, read at the first sandbox (see container-groups.ts). */
  private cgroupHost: CgroupHostProbe | undefined;
  /** The process groups of the containers this process used, by container id (swept by the orphan reaper). */
  private readonly groups = new Map<string, SandboxCgroups>();
  /** The stdio dir id of each container this process made or handed out (removed with it). */
  private readonly stdioIds = new Map<string, string>();
  /**
   * The FIFO pool of each stdio dir this process uses, by its id: made with the dir (primed while
   * the engine creates the container) or at the first handle, kept for every later handle of the
   * same container (a warm-pool claim, a resume), dropped when it is removed.
   */
  private readonly fifoPools = new Map<string, FifoPool>();
  private readonly warned = new Set<string>();
  private readonly sockets = new Set<Duplex>();
  private readonly networks: SandboxNetworks;
  private guard: Promise<void> | undefined;
  /** Persistent sandboxes' own dirs on a loop-mounted image each, where this host can. */
  private readonly disks: SandboxDisks;
  /** Why the engine refused a writable layer's size (`StorageOpt`) it was expected to take; then it goes unset. */
  private storageQuotaRefused: string | undefined;
  /** The engine's view of each prepared (unclaimed) pool container, for its claim. */
  private readonly prepared = new WeakMap<Sandbox, Dockerode.ContainerInspectInfo>();
  private closed = false;

  /** Warm pools: containers created and started before a session asks, renamed to it at claim. */
  readonly warm: WarmCapability<DockerSettings> = {
    shapeOf: (section) => dockerShapeOf(section),
    prepare: (shape) => this.preparePooled(shape),
    claim: (prepared, spec) => this.claimPooled(prepared, spec),
  };

  /** Snapshots: an image committed from the container, plus copies of its own dirs (snapshots.ts). */
  readonly snapshots: DockerSnapshots;

  constructor(opts: DockerBackendOptions) {
    this.docker = opts.docker ?? defaultDocker();
    this.installation = opts.installation;
    this.berthHome = path.resolve(opts.berthHome);
    this.logger = opts.log ?? Logger.silent();
    this.log = (msg) => this.logger.debug(msg);
    this.hostUser =
      opts.hostUser ??
      (typeof process.getuid === 'function' && typeof process.getgid === 'function'
        ? { uid: process.getuid(), gid: process.getgid() }
        : undefined);
    const lease = opts.lease ?? localLease();
    this.networks = new SandboxNetworks({ docker: this.docker, installation: this.installation, lease, log: this.log });
    this.disks = new SandboxDisks({
      root: sandboxesRoot(this.berthHome), lease, log: this.logger,
      host: { uid: process.getuid?.(), endpoint: describeEndpoint(this.docker) },
    });
    this.snapshots = new DockerSnapshots({
      docker: this.docker, installation: this.installation, berthHome: this.berthHome, log: this.logger,
      request: (doing, run) => this.request(doing, run),
      planFor: (spec, hostDir) => this.planFor(spec, hostDir),
      createAndStart: async (spec, plan) => (await Promise.all([this.createAndStart(spec, plan), this.installHostGuard()]))[0],
      sandboxOf: (spec, info, hostDir) => this.sandbox(spec, info, hostDir, false),
      groupOf: (info) => {
        const groups = this.groups.get(info.Id) ?? this.groupsOf(info, this.logger.with({ ref: info.Id }));
        return 'unavailable' in groups ? undefined : groups.dir;
      },
      withHostDir: (spec, hostDir, fn) => this.disks.hold(hostDir, async () => {
        await this.disks.attach(hostDir, spec.section.diskMb ?? LIMIT_DEFAULTS.diskMb);
        return fn();
      }),
      makeHostDirs: (dir, runAs) => this.makeHostDirs(dir, runAs),
      removeSandbox: (ref, hostDir) => this.remove(ref, hostDir),
    });
  }

  /** What `ensure` would create for `spec` with its host dir: its limits and the user it runs as. */
  private async planFor(spec: SandboxSpec<DockerSettings>, hostDir: string | undefined): Promise<Omit<CreatePlanInput, 'networkMode' | 'name' | 'image' | 'fill'>> {
    this.assertOpen();
    this.assertOwn(spec);
    const caps = await this.probe();
    const limits = this.limitsFor(spec.section, caps, false);
    return { spec, hostDir, limits, runAs: await runAsFor(spec, hostDir, caps.userns, this.hostUser) };
  }

  async check(section: DockerSettings): Promise<void> {
    await this.ping();
    await this.requireImage(section.image);
    const caps = await this.probe();
    this.limitsFor(section, caps, true);
    this.log(describeDiskBound(section, caps.storageQuota, this.storageQuotaRefused, this.disks.unavailable));
  }

  async ensure(spec: SandboxSpec<DockerSettings>, knownRef: string | undefined): Promise<Sandbox> {
    this.assertOpen();
    this.assertOwn(spec);
    if (knownRef !== undefined) assertContainerRef(knownRef);
    const caps = await this.probe();
    const limits = this.limitsFor(spec.section, caps, false);
    // The host guard is installed beside the engine's work (it costs ~100 ms of iptables); no
    // sandbox is handed out before it is in place.
    const [sandbox] = await Promise.all([
      spec.ephemeral ? this.ensureEphemeral(spec, knownRef, limits, caps) : this.ensurePersistent(spec, knownRef, limits, caps),
      this.installHostGuard(),
    ]);
    return sandbox;
  }

  /**
   * The host guard (egress/docker-guard.ts): no sandbox reaches a service of this host or the
   * metadata address, in any egress mode. Installed once per process (the rules are the host's and
   * outlive it); where berth lacks the right, or the engine is another machine's, it says why.
   */
  private installHostGuard(): Promise<void> {
    this.guard ??= (async () => {
      const status = this.engineIsRemote() ? { enforced: false, reason: REMOTE_ENGINE } : await installDockerGuard();
      if (!status.enforced) this.logger.warn(`host guard not enforced: ${status.reason ?? 'unknown'}; sandboxes may reach this host's services`);
      const old = await this.networks.unguarded().catch(() => []);
      if (old.length > 0) {
        this.logger.warn(`networks ${old.join(', ')} were made before berth named its bridges for the host guard, so their sandboxes may reach this host's services; ` +
          'they go once no sandbox uses them (berth rm their sandboxes), and new ones are guarded');
      }
    })();
    return this.guard;
  }

  /** The client's own endpoint (an injected client, DOCKER_HOST or the default socket): a unix socket is this host's engine. */
  private engineIsRemote(): boolean {
    return !describeEndpoint(this.docker).startsWith('unix://');
  }

  /** Every docker sandbox is on a guarded network, so the guard applies from the first call on. */
  async hostGuard(repair: boolean): Promise<GuardStatus> {
    if (this.engineIsRemote()) return { enforced: false, reason: REMOTE_ENGINE };
    const status = await keepDockerGuard(repair);
    if (status.restored.length > 0) this.logger.warn(`host guard rules were missing and are put back: ${status.restored.join('; ')}`);
    return { enforced: status.enforced, ...(status.reason === undefined ? {} : { reason: status.reason }) };
  }

  async remove(ref: string, hostDir: string | undefined): Promise<void> {
    assertContainerRef(ref);
    // Its stdio dir goes with it: known when this process handed it out, else asked of the engine.
    let stdioId = this.stdioIds.get(ref);
    if (stdioId === undefined) {
      try {
        const info = await this.request(`inspect container ${short(ref)}`, (abortSignal) => this.docker.getContainer(ref).inspect({ abortSignal }));
        stdioId = info.Config.Labels?.[STDIO_LABEL];
      } catch (err) {
        if (statusOf(err) !== 404) throw fromDockerError(this.docker, err, `inspect container ${short(ref)}`);
      }
    }
    try {
      await this.request(`remove container ${short(ref)}`, (abortSignal) => this.docker.getContainer(ref).remove({ force: true, v: true, abortSignal }));
    } catch (err) {
      if (statusOf(err) !== 404) throw fromDockerError(this.docker, err, `remove container ${short(ref)}`);
    }
    await this.dropStdio(stdioId);
    removeStdioDir(sandboxesRoot(this.berthHome), stdioId);
    dropFrozenMarker(sandboxesRoot(this.berthHome), ref);
    this.stdioIds.delete(ref);
    if (hostDir !== undefined) {
      // Only ever deletes inside berth's own docker sandbox root; its image is unmounted first.
      await this.disks.destroy(path.resolve(hostDir));
      await removeUnder(sandboxesRoot(this.berthHome), hostDir);
    }
    this.logger.with({ ref }).debug('removed');
  }

  async stop(ref: string): Promise<void> {
    assertContainerRef(ref);
    try {
      await this.request(`stop container ${short(ref)}`, (abortSignal) => this.docker.getContainer(ref).stop({ t: STOP_TIMEOUT_SECONDS, abortSignal }));
    } catch (err) {
      const status = statusOf(err);
      if (status !== 304 && status !== 404) throw fromDockerError(this.docker, err, `stop container ${short(ref)}`);
    }
  }

  /** From the container's cgroups on this host (berth's groups in it): one inspect, nothing started inside. */
  async commandsRunning(ref: string): Promise<boolean | undefined> {
    assertContainerRef(ref);
    let info: Dockerode.ContainerInspectInfo;
    try {
      info = await this.request(`inspect container ${short(ref)}`, (abortSignal) => this.docker.getContainer(ref).inspect({ abortSignal }));
    } catch (err) {
      if (statusOf(err) === 404) return false;
      throw fromDockerError(this.docker, err, `inspect container ${short(ref)}`);
    }
    if (!info.State.Running) return false;
    const groups = this.groupsOf(info, this.logger.with({ ref }));
    return 'unavailable' in groups ? undefined : groups.commandsRunning();
  }

  async listManaged(): Promise<ManagedSandbox[]> {
    let list: Dockerode.ContainerInfo[];
    try {
      list = await this.request('list containers', (abortSignal) => this.docker.listContainers({
        all: true,
        filters: { label: [`${LABEL.managed}=true`, `${LABEL.installation}=${this.installation}`] },
        abortSignal,
      }));
    } catch (err) {
      throw fromDockerError(this.docker, err, 'list containers');
    }
    return list
      .filter((c) => c.Labels[LABEL.installation] === this.installation)
      // An empty pool label is none: a sandbox made from a snapshot of a claimed pool container inherits it so.
      .map((c) => ({ c, shape: c.Labels[POOL_LABEL.shape] || undefined }))
      .map(({ c, shape }) => ({
        ref: c.Id,
        name: (c.Names[0] ?? '').replace(/^\//, ''),
        digest: c.Labels[LABEL.identity] ?? '',
        ephemeral: c.Labels[LABEL.lifecycle] === 'ephemeral',
        running: c.State === 'running',
        ...(shape === undefined ? {} : { pool: { shape, owner: c.Labels[POOL_LABEL.owner] ?? '' } }),
      }));
  }

  /**
   * Measures the sandbox's own disk use (writable layer + berth's dirs of it) against
   * `docker.diskMb`. A stopped sandbox over its bound is not started again (`ensure`).
   */
  checkDiskLimit(sandbox: Sandbox): Promise<BerthError | undefined> {
    // The broker asks only of the sandboxes this backend made, whose spec carries its section.
    return diskBreachOf(this.docker, sandbox.spec as SandboxSpec<DockerSettings>, sandbox.ref, sandbox.hostDir);
  }

  /** Each container's one-shot stats and writable layer size, a few at a time (the engine reads every container's cgroups). */
  async usage(refs: readonly string[]): Promise<Map<string, SandboxUsage>> {
    const out = new Map<string, SandboxUsage>();
    const queue = [...refs];
    const worker = async (): Promise<void> => {
      for (let ref = queue.shift(); ref !== undefined; ref = queue.shift()) {
        try {
          assertContainerRef(ref);
          const u = await containerUsageWithDisk(this.docker, ref);
          if (u !== undefined) out.set(ref, u);
        } catch (err) {
          this.logger.warn(`no usage of ${short(ref)}: ${(err as Error).message}`);
        }
      }
    };
    await Promise.all(Array.from({ length: Math.min(USAGE_PARALLEL, queue.length) }, worker));
    return out;
  }

  /**
   * Takes down the disk-image mounts of persistent sandboxes that no container of this
   * installation binds (a process that died between mount and create); their images stay, for
   * the sandbox's next call. The orphan reaper calls it.
   */
  async releaseIdleDisks(): Promise<string[]> {
    await this.sweepStdioDirs();
    const mounted = await this.disks.imageMounts();
    if (mounted.length === 0) return [];
    const bound = await this.boundOwnDirs();
    const idle = mounted.filter((dir) => !bound.has(dir));
    return idle.length === 0 ? [] : this.disks.releaseUnbound(idle, async (hostDir) => (await this.boundOwnDirs()).has(hostDir));
  }

  /** Forgets a stdio dir's FIFO pool, once no batch of it is being made (its dir goes next). */
  private async dropStdio(id: string | undefined): Promise<void> {
    const pool = id === undefined ? undefined : this.fifoPools.get(id);
    if (pool === undefined) return;
    this.fifoPools.delete(id!);
    await pool.close();
  }

  /** Removes the stdio dirs no container names (see `sweepStdioDirs`); one engine list. */
  private async sweepStdioDirs(): Promise<void> {
    let list: Dockerode.ContainerInfo[];
    try {
      list = await this.request('list containers', (abortSignal) => this.docker.listContainers({ all: true, filters: { label: [STDIO_LABEL] }, abortSignal }));
    } catch (err) {
      throw fromDockerError(this.docker, err, 'list containers');
    }
    const named = new Set(list.map((c) => c.Labels[STDIO_LABEL]).filter((id): id is string => id !== undefined));
    const removed = sweepStdioDirs(sandboxesRoot(this.berthHome), named, STALE_STDIO_DIR_MS);
    if (removed > 0) this.logger.debug(`removed ${removed} stdio dir(s) no container uses`);
  }

  /** The host dirs whose `home` or `workspace` a container of this installation binds. */
  private async boundOwnDirs(): Promise<Set<string>> {
    let list: Dockerode.ContainerInfo[];
    try {
      list = await this.request('list containers', (abortSignal) => this.docker.listContainers({
        all: true, filters: { label: [`${LABEL.installation}=${this.installation}`] }, abortSignal,
      }));
    } catch (err) {
      throw fromDockerError(this.docker, err, 'list containers');
    }
    return new Set(list.flatMap((c) => c.Mounts.filter((m) => m.Type === 'bind').map((m) => path.dirname(path.resolve(m.Source)))));
  }

  /** Removes this installation's networks that no container uses (the orphan reaper calls it). */
  reapIdleNetworks(opts: { timeoutMs?: number } = {}): Promise<string[]> {
    return this.networks.reapIdle(opts.timeoutMs);
  }

  /**
   * Removes the empty process groups of the containers this process used (ended jobs and `cmd &`
   * leftovers); a removed container's went with it (the runtime removes its cgroup whole).
   */
  async reapIdleGroups(): Promise<void> {
    for (const [id, groups] of this.groups) {
      if (groups.dir.exists) groups.sweep();
      else this.groups.delete(id);
    }
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    for (const socket of this.sockets) socket.destroy();
    this.sockets.clear();
    await Promise.all([...this.fifoPools.keys()].map((id) => this.dropStdio(id)));
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  /** Probe the engine once per instance; a failed probe is retried on the next call. */
  private probe(): Promise<EngineCapabilities> {
    this.capabilities ??= (async () => {
      try {
        const info = (await bounded(this.docker, PING_TIMEOUT_MS, 'report its capabilities', (abortSignal) => engineInfo(this.docker).info({ abortSignal })));
        const caps = capabilitiesFromInfo(info);
        this.log(`engine cgroup v${caps.cgroupVersion} (${caps.cgroupDriver}) memory=${caps.memoryLimit} cpu=${caps.cpuCfsQuota} pids=${caps.pidsLimit} storage quota=${caps.storageQuota ?? 'none'}`);
        return caps;
      } catch (err) {
        this.capabilities = undefined;
        throw fromDockerError(this.docker, err, 'report its capabilities');
      }
    })();
    return this.capabilities;
  }

  private async ping(): Promise<void> {
    try {
      await bounded(this.docker, PING_TIMEOUT_MS, 'answer a ping', (abortSignal) => engineInfo(this.docker).ping({ abortSignal }));
    } catch (err) {
      if (statusOf(err) === undefined && !(err instanceof BerthError)) throw unavailableError(this.docker, err);
      throw fromDockerError(this.docker, err, 'answer a ping');
    }
  }

  private async requireImage(image: string): Promise<void> {
    try {
      await this.request(`inspect image ${image}`, (abortSignal) => inspectImage(this.docker, image, abortSignal));
    } catch (err) {
      if (statusOf(err) === 404) throw imageMissingError(image, err);
      throw fromDockerError(this.docker, err, `inspect image ${image}`);
    }
  }

  private limitsFor(section: DockerSettings, caps: EngineCapabilities, isCheck: boolean): LimitPlan {
    const plan = planLimits(section, this.storageQuotaRefused === undefined ? caps : { ...caps, storageQuota: undefined });
    if (plan.errors.length > 0) throw new ConfigError(plan.errors.join('; '));
    for (const warning of plan.warnings) {
      if (isCheck || !this.warned.has(warning)) this.logger.warn(warning);
      this.warned.add(warning);
    }
    return plan;
  }

  private async preparePooled(shape: PoolShape<DockerSettings>): Promise<Sandbox> {
    this.assertOpen();
    const spec = poolSpec(this.installation, shape);
    // A pool sandbox is handed out without `ensure`: the host guard is in place before it exists.
    await this.installHostGuard();
    const caps = await this.probe();
    const limits = this.limitsFor(spec.section, caps, false);
    const runAs = await runAsFor(spec, undefined, caps.userns, this.hostUser);
    const name = poolName(shape.digest, randomBytes(4).toString('hex'));
    const info = await this.createAndStart(spec, {
      spec, name, image: spec.section.image, hostDir: undefined, limits, runAs, labels: poolLabels(this.installation, shape),
    });
    const sandbox = this.sandbox(spec, info, undefined, false);
    this.prepared.set(sandbox, info);
    return sandbox;
  }

  /**
   * The identity is given by the broker (under its lock) and recorded in its store by ref; the
   * container's labels cannot change, so only its name says whose it is now. Nothing inside the
   * container is asked.
   */
  private async claimPooled(prepared: Sandbox, spec: SandboxSpec<DockerSettings>): Promise<Sandbox> {
    this.assertOpen();
    this.assertOwn(spec);
    const info = this.prepared.get(prepared);
    if (info === undefined) throw new BerthError('internal', 'a warm-pool claim was given a sandbox this docker backend did not prepare');
    if (!spec.ephemeral || spec.mount !== null) throw new BerthError('internal', `sandbox "${spec.identity.key}" is not ephemeral without a mount; it cannot come from a warm pool`);
    this.prepared.delete(prepared);
    const name = ephemeralName(spec.digest, randomBytes(4).toString('hex'));
    // Not waited for: the store's record (by id) is what makes it the identity's, and the name is
    // for people (docker ps) and for a later adoption, which refuses it until the rename landed.
    // The session's first command runs meanwhile instead of after an engine round trip.
    void this.request(`rename container ${short(info.Id)}`, (abortSignal) => this.docker.getContainer(info.Id).rename({ name, abortSignal }))
      .catch((err: unknown) => this.about(spec, info.Id).debug(`could not rename the pool container to ${name}: ${String(err)}`));
    this.about(spec, info.Id).debug(`claimed from the warm pool as ${name}`);
    return this.sandbox(spec, { ...info, Name: `/${name}` }, undefined, false);
  }

  /**
   * The sandbox's own dirs are made ready (its disk image mounted) before its container is
   * created or started, under the sandbox's disk lease: the orphan reaper takes a mount down only
   * under it, once no container binds it.
   */
  private async ensurePersistent(spec: SandboxSpec<DockerSettings>, knownRef: string | undefined, limits: LimitPlan, caps: EngineCapabilities): Promise<Sandbox> {
    const hostDir = hostDirFor(this.berthHome, spec);
    return this.disks.hold(hostDir, async () => {
      const bound = await this.disks.attach(hostDir, spec.section.diskMb ?? LIMIT_DEFAULTS.diskMb);
      const sandbox = await this.ensurePersistentContainer(spec, knownRef, limits, caps, hostDir);
      this.about(spec, sandbox.ref).debug(`home and workspace bounded by ${bound === 'image' ? `disk image ${this.disks.imageOf(hostDir)}` : 'the periodic check'}`);
      return sandbox;
    });
  }

  private async ensurePersistentContainer(
    spec: SandboxSpec<DockerSettings>, knownRef: string | undefined, limits: LimitPlan, caps: EngineCapabilities, hostDir: string,
  ): Promise<Sandbox> {
    const name = persistentName(spec.digest);
    const runAs = await runAsFor(spec, hostDir, caps.userns, this.hostUser);
    const plan = { spec, name, image: spec.section.image, hostDir, limits, runAs };
    const adoptedRunAs = (info: Dockerode.ContainerInspectInfo) => this.adoptedRunAs(spec, info, hostDir, runAs, caps.userns);
    // Create-or-adopt. A 409 means another process of this installation holds the name; its
    // container may not be inspectable yet (still being created) or may vanish again (its start
    // failed and it cleaned up), so look again a few times before giving up.
    for (let attempt = 1; ; attempt += 1) {
      const existing = await this.inspect(name);
      if (existing) {
        const adopted = await this.adopt(spec, existing, hostDir, await adoptedRunAs(existing));
        return this.sandbox(spec, adopted, hostDir, knownRef !== undefined && !sameRef(knownRef, adopted.Id));
      }
      await this.makeHostDirs(hostDir, runAs);
      try {
        const created = await this.createAndStart(spec, plan);
        return this.sandbox(spec, created, hostDir, knownRef !== undefined);
      } catch (err) {
        if (statusOf(err) !== 409) throw err;
        if (attempt >= ADOPT_ATTEMPTS) throw fromDockerError(this.docker, err, `create container ${name}`);
        await new Promise((resolve) => setTimeout(resolve, 25 * attempt));
      }
    }
  }

  private async ensureEphemeral(spec: SandboxSpec<DockerSettings>, knownRef: string | undefined, limits: LimitPlan, caps: EngineCapabilities): Promise<Sandbox> {
    const runAs = await runAsFor(spec, undefined, caps.userns, this.hostUser);
    if (knownRef !== undefined) {
      const known = await this.inspect(knownRef);
      if (known) {
        // Only the exact container the store recorded, and only if it is this identity's.
        this.verifyOwner(spec, known, knownRef);
        if (known.Config.Labels?.[LABEL.lifecycle] !== 'ephemeral') {
          throw new PolicyRefusedError(
            `container ${short(known.Id)} recorded for "${spec.identity.key}" is not an ephemeral berth sandbox; remove it or clear its record`,
          );
        }
        this.verifyMount(spec, known, undefined);
        assertRunsAs(spec, known, await this.adoptedRunAs(spec, known, undefined, runAs, caps.userns));
        const placed = await this.networks.place(spec, known);
        const running = await this.startIfStopped(spec, placed, undefined);
        return this.sandbox(spec, running, undefined, false);
      }
      this.about(spec, knownRef).debug('container is gone; creating a new one');
    }
    const name = ephemeralName(spec.digest, randomBytes(4).toString('hex'));
    const created = await this.createAndStart(spec, { spec, name, image: spec.section.image, hostDir: undefined, limits, runAs });
    return this.sandbox(spec, created, undefined, knownRef !== undefined);
  }

  /**
   * Create and start on a network of the sandbox's tenant (or none). The network may be removed
   * by another process's reaper between join and start (it had no container yet): then again.
   * With `plan.fill`, an archive (a fork's tmpfs dirs) is unpacked at `/` in the sandbox as it
   * starts, before its warden answers (see `FILL_PREFIX`): the archive waits in its stdio dir and
   * goes once the warden answered.
   */
  private async createAndStart(spec: SandboxSpec<DockerSettings>, plan: StartPlan): Promise<Dockerode.ContainerInspectInfo> {
    // Its own stdio dir, made before it and removed with it (or now, if it is not made). Its
    // first FIFOs are made while the engine creates and starts the container.
    const { fill, ready, ...rest } = plan;
    ready?.catch(() => undefined); // told below (or moot, when this fails first)
    const stdio = makeStdioDir(sandboxesRoot(this.berthHome));
    this.fifoPools.set(stdio.id, primedPool(stdio.dir));
    // Both made while the engine creates the container, and waited for before its start; a failed
    // check is told before a failed archive (made from what it checks). The archive is readable
    // by the sandbox's user (the dir is bound into this container alone).
    const archive = path.join(stdio.dir, FILL_ARCHIVE);
    const before = (async () => {
      const writing = fill && pipeline(fill(), createWriteStream(archive, { flags: 'wx', mode: 0o444 })).then(() => chmod(archive, 0o444));
      const [checked, written] = await Promise.allSettled([ready, writing]);
      if (checked.status === 'rejected') throw checked.reason;
      if (written.status === 'rejected') throw written.reason;
    })();
    before.catch(() => undefined); // awaited on every path below
    try {
      for (let attempt = 1; ; attempt++) {
        const joined = networkOf(spec) === 'none' ? undefined : await this.networks.join(spec.identity.tenant);
        try {
          const egressCaDir = spec.egress?.ca === undefined ? undefined : await writeEgressCa(sandboxesRoot(this.berthHome), spec.egress.ca);
          const options = createOptions({ ...rest, networkMode: joined?.network.id ?? 'none', egressCaDir, stdio, fill: fill !== undefined });
          const info = await this.createAndStartOnce(spec, options, { filled: fill !== undefined, before });
          if (fill !== undefined) {
            await rm(archive, { force: true })
              .catch((e: unknown) => this.about(spec, info.Id).debug(`could not remove its fill archive (the stdio dir's removal takes it): ${String(e)}`));
          }
          this.stdioIds.set(info.Id, stdio.id);
          return info;
        } catch (err) {
          if (joined === undefined || !isNetworkGone(err)) throw err;
          this.networks.forget(spec.identity.tenant);
          if (attempt >= NETWORK_ATTEMPTS) throw err;
          this.about(spec).debug(`network ${joined.network.name} was removed while creating; joining again`);
        } finally {
          joined?.release();
        }
      }
    } catch (err) {
      // A failed check (a damaged snapshot) is told before what failed after it (the network, the engine).
      const checkFailure = await before.then(() => undefined, (e: unknown) => e);
      await this.dropStdio(stdio.id);
      removeStdioDir(sandboxesRoot(this.berthHome), stdio.id);
      throw checkFailure ?? err;
    }
  }

  /**
   * Create and start; a failed start removes what was created and rethrows the original error.
   * `before` must resolve before the start (its failure, told before any of the engine's, removes
   * the container); `filled`: the container unpacks an archive as it starts.
   */
  private async createAndStartOnce(
    spec: SandboxSpec<DockerSettings>,
    options: Dockerode.ContainerCreateOptions,
    start: { filled: boolean; before: Promise<unknown> },
  ): Promise<Dockerode.ContainerInspectInfo> {
    const image = spec.section.image;
    const { filled, before } = start;
    let container: Dockerode.Container;
    try {
      container = await this.request(`create container ${options.name ?? ''}`, (abortSignal) => this.docker.createContainer({ ...options, abortSignal }));
    } catch (err) {
      await before;
      if (options.HostConfig?.StorageOpt !== undefined && isStorageOptRefusal(err)) {
        // The driver looked able to cap a writable layer (overlay2 on xfs without pquota is not):
        // the periodic check alone bounds it from now on.
        this.storageQuotaRefused = engineMessage(err);
        this.logger.debug(`warning: the engine refused a writable layer's size (${this.storageQuotaRefused}); sandboxes' writable layers get the periodic disk check only`);
        const { StorageOpt: _refused, ...hostConfig } = options.HostConfig;
        return this.createAndStartOnce(spec, { ...options, HostConfig: hostConfig }, start);
      }
      const status = statusOf(err);
      if (status === 404) throw imageMissingError(image, err);
      if (status === 409) throw err; // name taken: the persistent path adopts
      throw fromDockerError(this.docker, err, `create container ${options.name ?? ''} for "${spec.identity.key}"`);
    }
    let watch: Awaited<ReturnType<typeof watchWardenStart>> | undefined;
    try {
      await before;
      // A resident warden says when its bash runs; without bash it ends a moment after the start,
      // which the inspect below would often miss (and the first command then fail unclearly).
      if (options.Labels?.[WARDEN_LABEL] === 'resident') watch = await watchWardenStart(this.docker, container.id, filled ? FILL_BOUND_MS : WARDEN_LINE_BOUND_MS);
      let startedHere = true;
      try {
        await this.request(`start container ${short(container.id)}`, (abortSignal) => container.start({ abortSignal }));
      } catch (err) {
        // 304: a racing process of this installation adopted and started it already (maybe
        // before the attach, whose first line is then gone): the inspect alone decides.
        if (statusOf(err) !== 304) throw err;
        startedHere = false;
      }
      const ran = startedHere ? await watch?.started : undefined;
      const fillFailure = watch?.fillFailure();
      if (fillFailure !== undefined) throw new BerthError('transfer_failed', `the new sandbox could not unpack its files as it started: ${fillFailure}`);
      if (filled && ran === undefined) {
        throw new TimeoutError(`the new sandbox did not unpack its files and start its warden within ${FILL_BOUND_MS} ms`);
      }
      const inspect = (): Promise<Dockerode.ContainerInspectInfo> =>
        this.request(`inspect container ${short(container.id)}`, (abortSignal) => container.inspect({ abortSignal }));
      let info = await inspect();
      // Its output ended: the engine records the exit a moment later.
      for (let i = 0; ran === false && info.State.Running && i < ENDED_POLLS; i++) {
        await sleep(ENDED_POLL_MS);
        info = await inspect();
      }
      if (!info.State.Running) throw endedAtStart(image, info.State);
      if (filled && ran !== true) throw new BerthError('sandbox_start_failed', 'the new sandbox\'s main process ended its output before its files were unpacked and its warden started');
      this.about(spec, container.id).debug(`created ${options.name ?? ''}`);
      return info;
    } catch (err) {
      try {
        await this.request(`remove container ${short(container.id)}`, (abortSignal) => container.remove({ force: true, v: true, abortSignal }));
      } catch (cleanupErr) {
        this.about(spec, container.id).debug(`could not remove the failed container: ${String(cleanupErr)}`);
      }
      throw fromDockerError(this.docker, err, `start container ${short(container.id)} for "${spec.identity.key}"`);
    } finally {
      watch?.close();
    }
  }

  private async adopt(
    spec: SandboxSpec<DockerSettings>,
    info: Dockerode.ContainerInspectInfo,
    hostDir: string,
    runAs: { uid: number; gid: number } | undefined,
  ): Promise<Dockerode.ContainerInspectInfo> {
    this.verifyOwner(spec, info);
    this.verifyMount(spec, info, hostDir);
    assertRunsAs(spec, info, runAs);
    return this.startIfStopped(spec, await this.networks.place(spec, info), hostDir);
  }

  /**
   * Who an existing sandbox must run as for this call. A call that asks for no mount uses the
   * sandbox with the workspace it was created with (see `verifyMount`), so that bind's owner
   * decides, not the absence of one in the call.
   */
  private async adoptedRunAs(
    spec: SandboxSpec<DockerSettings>, info: Dockerode.ContainerInspectInfo, hostDir: string | undefined, runAs: { uid: number; gid: number } | undefined, userns: boolean,
  ): Promise<{ uid: number; gid: number } | undefined> {
    const asked = spec.mount !== null || volumesOf(spec).some((v) => v.target === WORKSPACE);
    const have = info.Mounts.find((m) => m.Destination === WORKSPACE && m.Type === 'bind');
    const own = hostDir === undefined ? undefined : path.join(hostDir, 'workspace');
    if (asked || have === undefined || path.resolve(have.Source) === own) return runAs;
    return runAsFor({ ...spec, mount: path.resolve(have.Source) }, hostDir, userns, this.hostUser);
  }

  private verifyOwner(spec: SandboxSpec<DockerSettings>, info: Dockerode.ContainerInspectInfo, knownRef?: string): void {
    const labels = info.Config.Labels ?? {};
    if (labels[LABEL.installation] === this.installation && isClaimedPoolContainer(spec, info, knownRef)) return;
    if (labels[LABEL.installation] !== this.installation || labels[LABEL.identity] !== spec.digest) {
      throw new PolicyRefusedError(
        `container ${info.Name.replace(/^\//, '')} (${short(info.Id)}) does not belong to sandbox "${spec.identity.key}" of this installation ` +
          `(labels ${LABEL.installation}=${labels[LABEL.installation] ?? 'none'}); berth never adopts it — remove or rename it`,
      );
    }
  }

  /** A mount is fixed at create: refuse a sandbox whose /workspace differs from what is asked now. */
  private verifyMount(spec: SandboxSpec<DockerSettings>, info: Dockerode.ContainerInspectInfo, hostDir: string | undefined): void {
    const want = expectedWorkspaceSource(spec, hostDir);
    // Nothing asked (no session mount, no volume): whatever the shared sandbox has stays.
    const asked = spec.mount !== null || volumesOf(spec).some((v) => v.target === WORKSPACE);
    if (!asked || want === undefined) return;
    const have = info.Mounts.find((m) => m.Destination === WORKSPACE);
    const haveSource = have?.Type === 'bind' ? path.resolve(have.Source) : undefined;
    if (haveSource === want) return;
    throw new PolicyRefusedError(
      `sandbox "${spec.identity.key}" (container ${short(info.Id)}) already has ${haveSource ? `mount "${haveSource}"` : 'no host mount'} at ${WORKSPACE}; ` +
        `a mount is fixed when the sandbox is created, so "${want}" cannot be added — close or remove that sandbox, or use the same workspace`,
    );
  }

  /** A stopped sandbox is measured first: one stopped over its disk bound stays stopped. */
  private async startIfStopped(spec: SandboxSpec<DockerSettings>, info: Dockerode.ContainerInspectInfo, hostDir: string | undefined): Promise<Dockerode.ContainerInspectInfo> {
    if (info.State.Running && !info.State.Paused) return info;
    if (!info.State.Running) {
      // A measurement that fails (no du on this host, say) is logged; it does not keep a sandbox down.
      const breach = await diskBreachOf(this.docker, spec, info.Id, hostDir)
        .catch((e: unknown) => void this.about(spec, info.Id).debug(`could not measure disk use: ${String(e)}`));
      if (breach) throw breach;
    }
    const container = this.docker.getContainer(info.Id);
    try {
      if (info.State.Paused) await this.request(`unpause container ${short(info.Id)}`, (abortSignal) => container.unpause({ abortSignal }));
      else await this.request(`start container ${short(info.Id)}`, (abortSignal) => container.start({ abortSignal }));
    } catch (err) {
      // 304: another process started it first.
      if (statusOf(err) !== 304) throw fromDockerError(this.docker, err, `start container ${short(info.Id)}`);
    }
    this.about(spec, info.Id).debug('started');
    return this.request(`inspect container ${short(info.Id)}`, (abortSignal) => container.inspect({ abortSignal }));
  }

  private async inspect(ref: string): Promise<Dockerode.ContainerInspectInfo | undefined> {
    try {
      return await this.request(`inspect container ${short(ref)}`, (abortSignal) => this.docker.getContainer(ref).inspect({ abortSignal }));
    } catch (err) {
      if (statusOf(err) === 404) return undefined;
      throw fromDockerError(this.docker, err, `inspect container ${short(ref)}`);
    }
  }

  /**
   * berth's own dirs of a persistent sandbox, handed to the user it runs as (when berth runs as
   * root and can) so its shell can write its home and state dir. Only the two dirs themselves:
   * nothing below them is followed or chowned, so a link planted there cannot redirect it.
   */
  private async makeHostDirs(hostDir: string, runAs: { uid: number; gid: number } | undefined): Promise<void> {
    for (const dir of ['workspace', 'home']) {
      const p = path.join(hostDir, dir);
      await mkdir(p, { recursive: true, mode: 0o700 });
      if (runAs !== undefined && process.getuid?.() === 0) await chown(p, runAs.uid, runAs.gid);
    }
  }

  private sandbox(
    spec: SandboxSpec<DockerSettings>,
    info: Dockerode.ContainerInspectInfo,
    hostDir: string | undefined,
    recreated: boolean,
  ): Sandbox {
    if (recreated) this.about(spec, info.Id).debug('recreated (the one recorded was removed out of band)');
    const groups = this.groupsOf(info, this.about(spec, info.Id));
    if ('unavailable' in groups) this.about(spec, info.Id).debug(`commands are found by tags, not cgroups: ${groups.unavailable}`);
    else this.groups.set(info.Id, groups);
    if (!('unavailable' in groups) && thawLeftFrozen(groups.dir, sandboxesRoot(this.berthHome), info.Id, info.State.Paused)) {
      this.about(spec, info.Id).warn('thawed: a berth process that froze it for a snapshot ended before it let it run again');
    }
    const stdio = usableStdioDir(sandboxesRoot(this.berthHome), info);
    let fifos: FifoPool | undefined;
    if ('unavailable' in stdio) {
      this.about(spec, info.Id).debug(`processes' stdio goes through the engine's attach: ${stdio.unavailable}`);
    } else {
      const id = info.Config.Labels[STDIO_LABEL]!;
      this.stdioIds.set(info.Id, id);
      fifos = this.fifoPools.get(id);
      if (fifos === undefined) {
        // Sets another berth process made ahead and never used (it exited, or let the sandbox go).
        sweepStaleFifos(stdio.dir, STALE_FIFO_MS);
        fifos = primedPool(stdio.dir);
        this.fifoPools.set(id, fifos);
      }
    }
    return new ProcessSandbox(new DockerSandboxHandle({
      fifos,
      spec,
      info,
      hostDir,
      recreated,
      docker: this.docker,
      log: this.logger,
      track: (socket) => {
        this.sockets.add(socket);
        return () => this.sockets.delete(socket);
      },
      processGroups: 'unavailable' in groups ? undefined : groups,
    }));
  }

  /** The kernel's grouping of a running container, where berth manages it from this host (see containerGroups). */
  private groupsOf(info: Dockerode.ContainerInspectInfo, log: Logger): SandboxCgroups | { unavailable: string } {
    this.cgroupHost ??= probeCgroupHost();
    return containerGroups(this.cgroupHost, info, log);
  }

  /** Lines about one sandbox: its key, and its container when there is one. */
  private about(spec: SandboxSpec<DockerSettings>, ref?: string): Logger {
    return this.logger.with({ key: spec.identity.key, ref });
  }

  /** One engine request, bounded (see `bounded`): a hung engine fails the call instead of holding it. */
  private request<T>(doing: string, run: (abortSignal: AbortSignal) => Promise<T>): Promise<T> {
    return bounded(this.docker, ENGINE_REQUEST_TIMEOUT_MS, doing, run);
  }

  private assertOpen(): void {
    if (this.closed) throw new BackendUnavailableError('the docker backend was closed; create a new one');
  }

  private assertOwn(spec: SandboxSpec<DockerSettings>): void {
    if (spec.identity.installation !== this.installation) {
      throw new BerthError(
        'internal',
        `sandbox spec for installation "${spec.identity.installation}" given to the docker backend of "${this.installation}"`,
      );
    }
  }
}

/**
 * A ref from the state store goes into an Engine API URL path; anything but a container id or name
 * (a host dir of another backend, say) would address some other endpoint, so it is refused here.
 */
function assertContainerRef(ref: string): void {
  if (!/^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$/.test(ref)) {
    throw new BerthError('invalid_ref', `"${ref}" is not a docker container id or name; the state store record belongs to another backend (berth rm with the same scope flags clears it)`);
  }
}

export function short(ref: string): string {
  return /^[0-9a-f]{64}$/.test(ref) ? ref.slice(0, 12) : ref;
}

/**
 * A pool container claimed for `spec`: it has no identity label (labels are fixed at create), so
 * it is this identity's only as the exact container the store recorded for it (written under the
 * identity's lock at claim), renamed to the identity's name.
 */
function isClaimedPoolContainer(spec: SandboxSpec<DockerSettings>, info: Dockerode.ContainerInspectInfo, knownRef: string | undefined): boolean {
  const labels = info.Config.Labels ?? {};
  return (labels[POOL_LABEL.shape] ?? '') !== '' && labels[LABEL.identity] === undefined && knownRef !== undefined &&
    sameRef(knownRef, info.Id) && info.Name.replace(/^\//, '').startsWith(ephemeralName(spec.digest, ''));
}

function sameRef(known: string, id: string): boolean {
  return known === id || (known.length >= 12 && id.startsWith(known));
}

/**
 * A FIFO pool for a container's stdio dir, its first batch being made. Its processes may run as
 * any uid the engine maps (a user namespace), so a taken set opens to all: the dir is that
 * container's alone.
 */
function primedPool(dir: string): FifoPool {
  const pool = new FifoPool(dir, undefined, 0o666);
  void pool.prime().catch(() => undefined);
  return pool;
}
