import type { Duplex } from 'node:stream';
import type Dockerode from 'dockerode';
import type { ExecOnceResult, Sandbox, SandboxSpec, ShellTransport } from '../backend.js';
import { HOME, STATE_DIR, WORKSPACE } from './container-spec.js';
import { execOnceIn, openShellExec } from './exec-stream.js';

const EXEC_ONCE_TIMEOUT_MS = 30_000;

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
  readonly hostDir: string | undefined;
  readonly recreated: boolean;
  private readonly docker: Dockerode;
  private readonly log: (msg: string) => void;
  private readonly track: (socket: Duplex) => () => void;

  constructor(input: DockerSandboxInput) {
    this.spec = input.spec;
    this.ref = input.info.Id;
    this.name = input.info.Name.replace(/^\//, '');
    this.hostDir = input.hostDir;
    this.recreated = input.recreated;
    this.docker = input.docker;
    this.log = input.log;
    this.track = input.track;
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

  execOnce(argv: string[], opts?: { timeoutMs?: number }): Promise<ExecOnceResult> {
    return execOnceIn(this.docker, this.ref, argv, opts?.timeoutMs ?? EXEC_ONCE_TIMEOUT_MS);
  }
}
