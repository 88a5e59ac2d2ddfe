import path from 'node:path';
import type { Duplex } from 'node:stream';
import type Dockerode from 'dockerode';
import type { Logger } from '../../logging/logger.js';
import type { ProcessGroups, SandboxHandle, SandboxSpec, ShellTransport, SpawnedProcess, SpawnOptions } from '../backend.js';
import { attachMainProcess, spawnInContainer, type ContainerTarget } from './exec-process.js';
import { WARDEN_LABEL } from './container-spec.js';
import { HOME, STATE_DIR, WORKSPACE } from './paths.js';
import { containerUsage } from './usage.js';

export interface DockerSandboxInput {
  spec: SandboxSpec;
  info: Dockerode.ContainerInspectInfo;
  hostDir: string | undefined;
  recreated: boolean;
  docker: Dockerode;
  log: Logger;
  track: (socket: Duplex) => () => void;
  /** The container's kernel grouping, when berth manages its cgroups from this host. */
  processGroups?: ProcessGroups | undefined;
}

/** One running container of a sandbox identity: processes start in it through `docker exec`. */
export class DockerSandboxHandle implements SandboxHandle {
  readonly spec: SandboxSpec;
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
  readonly processGroups: ProcessGroups | undefined;
  private readonly docker: Dockerode;
  private readonly log: Logger;
  private readonly target: ContainerTarget;
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
    // create); an older one's main process is `sleep`, and its warden an exec as before.
    const resident = input.info.Config.Labels?.[WARDEN_LABEL] === 'resident' && input.info.Config.OpenStdin === true;
    this.attachWarden = resident ? () => attachMainProcess(this.target) : undefined;
    this.processGroups = input.processGroups;
    this.binds = (input.info.Mounts ?? [])
      .filter((m) => m.Type === 'bind' && typeof m.Source === 'string' && typeof m.Destination === 'string')
      .map((m) => ({ source: path.resolve(m.Source), destination: path.posix.normalize(m.Destination) }))
      .sort((a, b) => b.destination.length - a.destination.length);
  }

  spawn(argv: readonly string[], opts: SpawnOptions): Promise<SpawnedProcess> {
    return spawnInContainer(this.target, argv, { ...opts, env: { HOME, ...opts.env } });
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
