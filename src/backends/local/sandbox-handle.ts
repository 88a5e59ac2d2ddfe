import { join } from 'node:path';
import type { SandboxHandle, SandboxSpec, SpawnOptions } from '../backend.js';
import type { ShellTransport, SpawnedProcess } from '../../shell/transport.js';
import type { SandboxCgroups } from '../cgroups/sandbox-cgroups.js';
import { openShellVia } from '../plumbing/open-shell.js';
import { ProcessSandbox } from '../plumbing/process-sandbox.js';
import { spawnOnHost, type HostProcess } from './spawn.js';

/** One local sandbox: a host dir, and processes started on the host in it. */
export class LocalSandboxHandle implements SandboxHandle {
  readonly ref: string;
  readonly name: string;
  readonly defaultCwd: string;
  readonly stateDir: string;
  readonly hostDir: string;
  readonly homeDir: string;
  /*
   * Only the sandbox dir: the host's /tmp is shared by every session and process on the machine,
   * so it is no root of this sandbox's files (an attached workspace is added by the caller).
   */
  readonly fileRoots: readonly string[];
  readonly recreated = false;

  constructor(
    readonly spec: SandboxSpec,
    dir: string,
    /** Its kernel grouping, when berth may make cgroups here (as root): its shells start in its cgroup. */
    readonly processGroups?: SandboxCgroups | undefined,
  ) {
    this.ref = dir;
    this.name = spec.dirName;
    this.defaultCwd = dir;
    this.stateDir = join(dir, '.berth');
    this.hostDir = dir;
    this.homeDir = dir;
    this.fileRoots = [dir];
  }

  /**
   * A host process in the sandbox dir. Its environment is built only from the sandbox's base
   * (PATH, HOME, LANG, TERM, SHELL) and what the caller grants, never berth's whole environment.
   */
  spawn(argv: readonly string[], opts: SpawnOptions): Promise<SpawnedProcess> {
    return spawnOnHost(argv, { cwd: opts.cwd ?? this.defaultCwd, env: { ...this.baseEnv(), ...opts.env }, stdin: opts.stdin, where: `sandbox ${this.name}` });
  }

  /**
   * As `spawn`, with stdin on a FIFO (a real pipe, which a persistent shell re-executes onto; see
   * fifo-stdin.ts), in the sandbox's cgroup where it has one: it runs nothing before berth writes
   * to it, so all it starts is in the cgroup.
   */
  async spawnWithPipe(argv: readonly string[], opts: SpawnOptions): Promise<HostProcess> {
    const p = await spawnOnHost(argv, { cwd: opts.cwd ?? this.defaultCwd, env: { ...this.baseEnv(), ...opts.env }, stdin: opts.stdin ? 'fifo' : false, where: `sandbox ${this.name}` });
    this.processGroups?.admit(p.pid);
    return p;
  }

  /** Every path of a local sandbox is a host path: the file is its own host path. */
  hostPathOf(sandboxPath: string): { hostPath: string; hostRoot: string } {
    return { hostPath: sandboxPath, hostRoot: sandboxPath };
  }

  private baseEnv(): Record<string, string> {
    return {
      PATH: process.env['PATH'] ?? '/usr/local/bin:/usr/bin:/bin',
      HOME: this.hostDir,
      LANG: 'C.UTF-8',
      TERM: 'dumb',
      SHELL: '/bin/bash',
    };
  }
}

/** A local sandbox: the shared plumbing, with its shells on a real pipe. */
export class LocalSandbox extends ProcessSandbox {
  constructor(private readonly local: LocalSandboxHandle) {
    super(local);
  }

  override openShell(opts: { env: Readonly<Record<string, string>>; cwd: string }): Promise<ShellTransport> {
    return openShellVia((argv, o) => this.local.spawnWithPipe(argv, o), opts);
  }
}
