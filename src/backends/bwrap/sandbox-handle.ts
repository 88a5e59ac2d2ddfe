import { readdirSync } from 'node:fs';
import { join, posix } from 'node:path';
import { BerthError, SandboxNotFoundError } from '../../errors.js';
import { networkOf, type NetnsRef, type SandboxHandle, type SandboxSpec, type SpawnOptions } from '../backend.js';
import type { SpawnedProcess } from '../../shell/transport.js';
import type { SandboxCgroups } from '../cgroups/sandbox-cgroups.js';
import { fromSpawnError } from '../plumbing/spawn-errors.js';
import { SANDBOX_HOME, SANDBOX_TMP, SANDBOX_USER, SANDBOX_WORKSPACE } from './layout.js';
import type { SandboxPlacement } from './placement.js';
import { pidNsOf } from './records.js';
import type { BwrapSandbox } from './sandbox.js';
import type { BwrapSettings } from './settings.js';

/** The environment every process of a bwrap sandbox starts with, before what the caller grants. */
const BASE_ENV: Readonly<Record<string, string>> = {
  PATH: '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
  HOME: SANDBOX_HOME,
  USER: SANDBOX_USER,
  LOGNAME: SANDBOX_USER,
  LANG: 'C.UTF-8',
  TERM: 'dumb',
  SHELL: '/bin/bash',
};

/** One running bwrap sandbox as the broker sees it: its dirs, and processes started by its init loop. */
export class BwrapSandboxHandle implements SandboxHandle {
  readonly ref: string;
  readonly name: string;
  readonly defaultCwd = SANDBOX_WORKSPACE;
  readonly stateDir = `${SANDBOX_HOME}/.berth`;
  readonly hostDir: string;
  readonly homeDir = SANDBOX_HOME;
  readonly fileRoots: readonly string[] = [SANDBOX_WORKSPACE, SANDBOX_HOME, SANDBOX_TMP];
  readonly volatileDirs: readonly string[] = ['/dev/shm', SANDBOX_TMP];
  private readonly binds: readonly { inside: string; host: string }[];

  constructor(
    readonly spec: SandboxSpec<BwrapSettings>,
    private readonly sb: BwrapSandbox,
    placement: SandboxPlacement,
    readonly recreated: boolean,
    private readonly maxProcesses: number,
    /** Its kernel grouping, when berth may make cgroups here (see backends/cgroups). */
    readonly processGroups?: SandboxCgroups | undefined,
  ) {
    this.ref = placement.dirs.root;
    this.name = posix.basename(placement.dirs.root);
    this.hostDir = placement.dirs.root;
    this.binds = [
      { inside: SANDBOX_WORKSPACE, host: placement.workspace ?? placement.dirs.workspace },
      { inside: SANDBOX_HOME, host: placement.dirs.home },
    ];
  }

  /** Its own network namespace (loopback only), where berth's egress proxy listens for it. */
  async netns(): Promise<NetnsRef> {
    const ns = this.sb.netns();
    if (ns === undefined) throw new SandboxNotFoundError(`bwrap sandbox ${this.name} has ended`);
    if (networkOf(this.spec) === 'host') {
      throw new BerthError('listen_failed', `bwrap sandbox ${this.name} shares the host's network (bwrap.network: host), where a proxy listener would serve every host process; berth's egress proxy needs egress.mode allowlist or bwrap.network: none`);
    }
    return ns;
  }

  async spawn(argv: readonly string[], opts: SpawnOptions): Promise<SpawnedProcess> {
    if (this.sb.gone) throw new SandboxNotFoundError(`bwrap sandbox ${this.name} has ended`);
    let p;
    try {
      p = await this.sb.spawn(argv, { env: { ...BASE_ENV, ...opts.env }, cwd: opts.cwd ?? this.defaultCwd, stdin: opts.stdin });
    } catch (err) {
      if (this.sb.gone) throw new SandboxNotFoundError(`bwrap sandbox ${this.name} has ended`, { cause: err });
      throw fromSpawnError(err, argv[0] ?? '', `sandbox ${this.name}`);
    }
    return {
      stdin: p.stdin ?? null,
      stdout: p.stdout,
      stderr: p.stderr,
      exited: p.exited,
      // FIFOs on the host, opened by berth.
      hostPipes: true,
      // Its process group: what it started in the background goes too (the init loop made the group).
      kill: () => p.kill('KILL'),
      // As the init loop (berth's own) reported it, and that process among the sandbox's on the host.
      pids: async () => ({ sandbox: p.pid, host: this.processGroups?.hostPidOf(p.pid) }),
    };
  }

  /** Processes in its pid namespace, as the host's /proc shows them (nothing is started inside). */
  async processCount(): Promise<{ current: number; limit: number } | undefined> {
    const ns = this.sb.pidNs;
    if (this.sb.gone || ns === undefined) return undefined;
    let current = 0;
    for (const d of readdirSync('/proc')) {
      if (/^\d+$/.test(d) && pidNsOf(Number(d)) === ns) current++;
    }
    return { current, limit: this.maxProcesses };
  }

  hostPathOf(sandboxPath: string): { hostPath: string; hostRoot: string } | undefined {
    for (const b of this.binds) {
      if (sandboxPath === b.inside || sandboxPath.startsWith(`${b.inside}/`)) {
        const rel = posix.relative(b.inside, sandboxPath);
        return { hostPath: rel === '' ? b.host : join(b.host, ...rel.split('/')), hostRoot: b.host };
      }
    }
    return undefined;
  }
}
