import path from 'node:path';
import type { Duplex, Readable } from 'node:stream';
import type Dockerode from 'dockerode';
import type { ExecOnceOptions, ExecOnceResult, Sandbox, SandboxSpec, ShellTransport } from '../backend.js';
import { getArchiveExec, putArchiveExec } from './archive-exec.js';
import { HOME, STATE_DIR, WORKSPACE } from './container-spec.js';
import { withTimeout } from './engine.js';
import { execOnceIn, openShellExec } from './exec-stream.js';

const EXEC_ONCE_TIMEOUT_MS = 30_000;
const STATS_TIMEOUT_MS = 5_000;

export interface DockerSandboxInput {
  spec: SandboxSpec;
  info: Dockerode.ContainerInspectInfo;
  hostDir: string | undefined;
  recreated: boolean;
  docker: Dockerode;
  log: (msg: string) => void;
  track: (socket: Duplex) => () => void;
}

/** One running container of a sandbox identity. */
export class DockerSandbox implements Sandbox {
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
  private readonly docker: Dockerode;
  private readonly log: (msg: string) => void;
  private readonly track: (socket: Duplex) => () => void;
  /** Host binds as the container has them (fixed at create), longest destination first. */
  private readonly binds: { source: string; destination: string }[];

  constructor(input: DockerSandboxInput) {
    this.spec = input.spec;
    this.ref = input.info.Id;
    this.name = input.info.Name.replace(/^\//, '');
    this.hostDir = input.hostDir;
    this.recreated = input.recreated;
    this.docker = input.docker;
    this.log = input.log;
    this.track = input.track;
    this.volatileDirs = Object.keys(input.info.HostConfig?.Tmpfs ?? {}).sort();
    this.binds = (input.info.Mounts ?? [])
      .filter((m) => m.Type === 'bind' && typeof m.Source === 'string' && typeof m.Destination === 'string')
      .map((m) => ({ source: path.resolve(m.Source), destination: path.posix.normalize(m.Destination) }))
      .sort((a, b) => b.destination.length - a.destination.length);
  }

  openShell(opts: { env: Readonly<Record<string, string>>; cwd: string }): Promise<ShellTransport> {
    return openShellExec({
      docker: this.docker,
      containerId: this.ref,
      env: { HOME, ...opts.env },
      cwd: opts.cwd,
      track: this.track,
      log: (msg) => this.log(`${this.spec.identity.key} ${this.ref.slice(0, 12)}: ${msg}`),
    });
  }

  /** From the engine's one-shot stats (the pids cgroup): no process in the container needed. */
  async processCount(): Promise<{ current: number; limit: number } | undefined> {
    try {
      const opts = { stream: false, 'one-shot': true } as { stream: false };
      const stats = (await withTimeout(this.docker.getContainer(this.ref).stats(opts), STATS_TIMEOUT_MS, () => new Error('stats timed out'))) as {
        pids_stats?: { current?: number; limit?: number };
      };
      const { current, limit } = stats.pids_stats ?? {};
      return typeof current === 'number' && typeof limit === 'number' && limit > 0 ? { current, limit } : undefined;
    } catch (err) {
      this.log(`${this.spec.identity.key}: no process count: ${(err as Error).message}`);
      return undefined;
    }
  }

  execOnce(argv: string[], opts?: ExecOnceOptions): Promise<ExecOnceResult> {
    return execOnceIn(this.docker, this.ref, argv, { timeoutMs: opts?.timeoutMs ?? EXEC_ONCE_TIMEOUT_MS, maxOutputBytes: opts?.maxOutputBytes });
  }

  putArchive(destDir: string, tar: Buffer | Readable): Promise<void> {
    return putArchiveExec(this.docker, this.ref, destDir, tar);
  }

  getArchive(p: string): Promise<Readable> {
    return getArchiveExec(this.docker, this.ref, p);
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
