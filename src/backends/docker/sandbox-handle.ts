import { readFile, readlink } from 'node:fs/promises';
import path from 'node:path';
import { BackendUnavailableError } from '../../errors.js';
import type { Duplex } from 'node:stream';
import type Dockerode from 'dockerode';
import type { Logger } from '../../logging/logger.js';
import type { NetnsRef, SandboxHandle, SandboxSpec, SpawnOptions } from '../backend.js';
import type { ShellTransport, SpawnedProcess } from '../../shell/transport.js';
import type { SandboxCgroups } from '../cgroups/sandbox-cgroups.js';
import { SHELL_TAG_ENV } from './exec-stream.js';
import { attachMainProcess, spawnInContainer, spawnOverFifos, type ContainerTarget } from './spawn.js';
import type { FifoPool } from '../plumbing/fifo-pool.js';
import { WARDEN_LABEL } from './container-spec.js';
import { HOME, STATE_DIR, WORKSPACE } from './paths.js';
import { containerUsage } from './usage.js';
import { pidsOnThisHost } from '../cgroups/cgroup-host.js';
import type { DockerSettings } from './settings.js';

export interface DockerSandboxInput {
  spec: SandboxSpec<DockerSettings>;
  info: Dockerode.ContainerInspectInfo;
  hostDir: string | undefined;
  recreated: boolean;
  docker: Dockerode;
  log: Logger;
  track: (socket: Duplex) => () => void;
  /** The container's kernel grouping, when berth manages its cgroups from this host. */
  processGroups?: SandboxCgroups | undefined;
  /** FIFO sets in the container's stdio dir, when berth can use it from this host (stdio-dir.ts). */
  fifos?: FifoPool | undefined;
}

/** How long a new exec's process may take to appear in its container's cgroup. */
const PID_WAIT_MS = 5_000;

/** The first defined value of `look`, asked every few milliseconds for at most `ms`, or until `over`. */
async function firstOf<T>(look: () => T | undefined, over: () => boolean, ms: number): Promise<T | undefined> {
  const deadline = Date.now() + ms;
  for (;;) {
    const found = look();
    if (found !== undefined || over() || Date.now() >= deadline) return found;
    await new Promise((r) => setTimeout(r, 2));
  }
}

/** One running container of a sandbox identity: processes start in it through `docker exec`. */
export class DockerSandboxHandle implements SandboxHandle {
  readonly spec: SandboxSpec<DockerSettings>;
  readonly ref: string;
  readonly name: string;
  readonly defaultCwd = WORKSPACE;
  readonly stateDir = STATE_DIR;
  readonly homeDir = HOME;
  readonly fileRoots: readonly string[] = [WORKSPACE, HOME, '/tmp'];
  readonly hostDir: string | undefined;
  readonly recreated: boolean;
  readonly volatileDirs: readonly string[];
  readonly attachWarden: (() => Promise<ShellTransport>) | undefined;
  readonly processGroups: SandboxCgroups | undefined;
  private readonly docker: Dockerode;
  private readonly log: Logger;
  private readonly target: ContainerTarget;
  private readonly fifos: FifoPool | undefined;
  /** Host binds as the container has them (fixed at create), longest destination first. */
  private readonly binds: { source: string; destination: string }[];

  constructor(input: DockerSandboxInput) {
    this.spec = input.spec;
    this.ref = input.info.Id;
    this.name = input.info.Name.replace(/^\//, '');
    this.hostDir = input.hostDir;
    this.recreated = input.recreated;
    this.docker = input.docker;
    this.log = input.log.with({ key: input.spec.identity.key, ref: input.info.Id });
    this.target = { docker: input.docker, containerId: this.ref, track: input.track, log: this.log };
    this.volatileDirs = Object.keys(input.info.HostConfig?.Tmpfs ?? {}).sort();
    // Only a container this berth made with its warden as the main process (labels are fixed at
    // create); another's main process is `sleep`, and its warden is an exec.
    const resident = input.info.Config.Labels?.[WARDEN_LABEL] === 'resident' && input.info.Config.OpenStdin === true;
    this.attachWarden = resident ? () => attachMainProcess(this.target) : undefined;
    this.processGroups = input.processGroups;
    this.fifos = input.fifos;
    this.binds = (input.info.Mounts ?? [])
      .filter((m) => m.Type === 'bind' && typeof m.Source === 'string' && typeof m.Destination === 'string')
      .map((m) => ({ source: path.resolve(m.Source), destination: path.posix.normalize(m.Destination) }))
      .sort((a, b) => b.destination.length - a.destination.length);
  }

  /**
   * The container's network namespace as this host sees it: its main process's, asked of the
   * engine now (a restarted container has a new one). Only for an engine on this host, checked by
   * the process's cgroup naming the container.
   */
  async netns(): Promise<NetnsRef> {
    const info = await this.docker.getContainer(this.ref).inspect();
    const pid = info.State?.Pid ?? 0;
    const path = `/proc/${pid}/ns/net`;
    // The namespace first, then the check that the pid is the container's: a pid reused after the
    // check names another namespace, which the listener refuses when it opens the path.
    let ns = '';
    let cgroup = '';
    try {
      if (pid > 0) {
        ns = await readlink(path);
        cgroup = await readFile(`/proc/${pid}/cgroup`, 'utf8');
      }
    } catch {
      // Not a process of this host.
    }
    if (ns === '' || !cgroup.includes(this.ref)) {
      throw new BackendUnavailableError(
        `sandbox container ${this.ref.slice(0, 12)} is ${pid > 0 ? 'not on this host' : 'not running'}, so berth's egress proxy cannot listen in its network; ` +
          'egress allowlist and credentials need the docker engine on the host berth runs on',
      );
    }
    return { path, ns };
  }

  /**
   * Over FIFOs in the container's stdio dir where there is one berth can use (its input and output
   * never pass through the engine), else through the exec's attach.
   */
  async spawn(argv: readonly string[], opts: SpawnOptions): Promise<SpawnedProcess> {
    const o = { ...opts, env: { HOME, ...opts.env } };
    const { tag, ...p } = this.fifos === undefined ? await spawnInContainer(this.target, argv, o) : await spawnOverFifos(this.target, this.fifos, argv, o);
    const groups = this.processGroups;
    if (groups === undefined) return p;
    // Found on this host by the tag its exec gave it, among the processes in the container's own
    // cgroup (berth's alone: what commands start lives in their groups), once the engine has
    // started it (a moment after the exec's stream opened; the exec's inspect names it later still).
    let ended = false;
    void p.exited.then(() => (ended = true));
    const look = (): number | undefined => groups.hostPidWithEnv(`${SHELL_TAG_ENV}=${tag}`);
    return { ...p, pids: async () => pidsOnThisHost(await firstOf(look, () => ended, PID_WAIT_MS)) };
  }

  /** From the engine's one-shot stats (the pids cgroup): no process in the container needed. */
  async processCount(): Promise<{ current: number; limit: number } | undefined> {
    try {
      const u = await containerUsage(this.docker, this.ref);
      return u?.processes !== undefined && u.processLimit !== undefined ? { current: u.processes, limit: u.processLimit } : undefined;
    } catch (err) {
      this.log.debug(`no process count: ${(err as Error).message}`);
      return undefined;
    }
  }

  hostPathOf(sandboxPath: string): { hostPath: string; hostRoot: string } | undefined {
    for (const b of this.binds) {
      if (sandboxPath === b.destination || sandboxPath.startsWith(b.destination === '/' ? '/' : `${b.destination}/`)) {
        const rel = path.posix.relative(b.destination, sandboxPath);
        return { hostPath: rel === '' ? b.source : path.join(b.source, ...rel.split('/')), hostRoot: b.source };
      }
    }
    return undefined;
  }
}
