import { randomBytes } from 'node:crypto';
import { mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { BerthError } from '../../errors.js';
import type { Logger } from '../../logging/logger.js';
import type { ProcessGroups, ProcessPids, ShellGroups } from '../../shell/transport.js';
import { CgroupDir, errnoOf } from './cgroup-dir.js';
import { cgroupsOf, mechanismUnder, readPids, type CgroupHost } from './cgroup-host.js';
import { parseNsPids } from './proc-files.js';
import { CgroupShell } from './shell-cgroups.js';

/** Every group berth makes starts so; nothing else under a sandbox's cgroup is ever touched. */
export const GROUP_PREFIX = 'berth-';

/** Bound on each wait for the kernel (a group to freeze, a killed group to empty). */
const DEFAULT_WAIT_MS = 5_000;

/** Attempts at making a group and moving a process in, when another berth process swept it away in between. */
const MOVE_ATTEMPTS = 3;

export interface SandboxCgroupsOptions {
  host: CgroupHost;
  /** The sandbox's own cgroup, as a path in the cgroup2 hierarchy (`/docker/<id>`); berth's groups nest in it. */
  base: string;
  /**
   * Which `NSpid` column holds a pid as the sandbox sees it (`hostPidOf`): 0 when the sandbox
   * shares berth's pid namespace (local), 1 for a namespace made in berth's (a container, bwrap).
   */
  pidLevel: number;
  /** The files of the sandbox's pids limit, where a pids cgroup bounds it. */
  pids?: { current: string; max: string } | undefined;
  /** berth made the sandbox's cgroup itself (bwrap, local): made again if another berth process reaped it empty. */
  ownBase?: boolean;
  waitMs?: number;
  log: Logger;
}

/**
 * Berth's groups of one sandbox (see `ProcessGroups`): cgroup2 directories `berth-*` nested in the
 * sandbox's own cgroup, so its memory and pids limits keep applying to everything in them. Only a
 * process in the sandbox's cgroup (or in one of berth's groups there) is ever moved or signalled,
 * so no pid, whoever names it, reaches a process of the host.
 */
export class SandboxCgroups implements ProcessGroups {
  readonly mechanism: string;
  readonly dir: CgroupDir;
  readonly waitMs: number;

  constructor(private readonly opts: SandboxCgroupsOptions) {
    this.dir = new CgroupDir(join(opts.host.unified, opts.base));
    this.mechanism = mechanismUnder(this.dir.path);
    this.waitMs = opts.waitMs ?? DEFAULT_WAIT_MS;
  }

  get log(): Logger {
    return this.opts.log;
  }

  async adopt(pids: ProcessPids): Promise<ShellGroups | undefined> {
    this.sweep();
    const hostPid = pids.host;
    if (hostPid === undefined) {
      this.log.debug(`cgroups: the shell's pid on the host is unknown; its commands are found by tags`);
      return undefined;
    }
    if (!this.holds(hostPid)) {
      this.log.debug(`cgroups: process ${hostPid} is not in ${this.opts.base}; its commands are found by tags`);
      return undefined;
    }
    const shell = new CgroupShell(this, hostPid);
    shell.prepare();
    this.log.debug(`cgroups: shell ${hostPid} in ${this.opts.base}, a group per command, ended by ${this.mechanism}`);
    return shell;
  }

  /**
   * Moves host process `hostPid` into the sandbox's own cgroup: a process berth started for the
   * sandbox (bwrap's pid 1, a local shell), before it runs anything there. False when it could
   * not (logged): the process is then not among the sandbox's, and its commands are found by tags.
   */
  admit(hostPid: number): boolean {
    try {
      this.again(() => this.dir.enter(hostPid));
      return true;
    } catch (err) {
      this.log.debug(`cgroups: could not move process ${hostPid} into ${this.opts.base}: ${String(err)}`);
      return false;
    }
  }

  /** As `admit`, off berth's event loop: the move that starts a sandbox may wait for the kernel. */
  async admitAsync(hostPid: number): Promise<boolean> {
    try {
      await this.dir.enterAsync(hostPid).catch(async (err: unknown) => {
        if (!this.madeAgain(err)) throw err;
        await this.dir.enterAsync(hostPid);
      });
      return true;
    } catch (err) {
      this.log.debug(`cgroups: could not move process ${hostPid} into ${this.opts.base}: ${String(err)}`);
      return false;
    }
  }

  async killGroup(name: string): Promise<number | undefined> {
    if (!/^[A-Za-z0-9_-]+$/.test(name)) throw new BerthError('internal', `"${name}" cannot name a process group`);
    const group = new CgroupDir(join(this.dir.path, `${GROUP_PREFIX}${name}`));
    if (!group.exists) return undefined;
    const killed = await group.kill(this.waitMs);
    group.remove();
    return killed;
  }

  /**
   * Makes a new group (named, or with a random name) and moves host process `hostPid` into it.
   * A group another berth process swept away before the move is made again.
   */
  moveToNew(hostPid: number, name?: string): CgroupDir {
    for (let attempt = 1; ; attempt++) {
      const group = this.again(() => CgroupDir.make(this.dir.path, `${GROUP_PREFIX}${name ?? randomBytes(6).toString('hex')}`));
      try {
        group.enter(hostPid);
        return group;
      } catch (err) {
        group.remove();
        if (errnoOf(err) !== 'ENOENT' || attempt >= MOVE_ATTEMPTS) throw err;
      }
    }
  }

  /** Whether host process `hostPid` is one of this sandbox's: in its cgroup or one of berth's groups there. */
  holds(hostPid: number): boolean {
    const path = cgroupsOf(hostPid)?.unified;
    return path !== undefined && this.inSandbox(path);
  }

  /** Whether cgroup `path` is the sandbox's own or one of berth's groups there. */
  private inSandbox(path: string): boolean {
    return path === this.opts.base || path.startsWith(`${this.opts.base === '/' ? '' : this.opts.base}/${GROUP_PREFIX}`);
  }

  /** The sandbox's pids in use and limit, where a pids cgroup bounds it. */
  pidsInUse(): { current: number; max: number } | undefined {
    return this.opts.pids === undefined ? undefined : readPids(this.opts.pids);
  }

  /** Runs `op`, and once more after making the sandbox's own cgroup again when berth made it and it is gone. */
  private again<T>(op: () => T): T {
    try {
      return op();
    } catch (err) {
      if (!this.madeAgain(err)) throw err;
      return op();
    }
  }

  /** After `err` from an operation on the sandbox's cgroup: true when berth made it, it was gone, and it is made again now. */
  private madeAgain(err: unknown): boolean {
    if (this.opts.ownBase !== true || errnoOf(err) !== 'ENOENT' || this.dir.exists) return false;
    mkdirSync(this.dir.path, { recursive: true });
    return true;
  }

  /**
   * Whether some process is still in one of berth's groups: what a command started and left
   * running (a `cmd &`, a `setsid` daemon: nothing a command starts can leave its group), or, when
   * `shells` is not given, a shell of a berth process; given, the live shells it names (host pids)
   * and any shell berth started (see `holdsCommands`) are left out. Read from the kernel's files alone.
   */
  commandsRunning(shells?: ReadonlySet<number>): boolean {
    return this.dir.children(GROUP_PREFIX).some((g) => !g.isEmpty() && (shells === undefined || this.holdsCommands(g, shells)));
  }

  /**
   * Whether `group` holds a process a command started: one not in `shells` whose parent is in the
   * sandbox (a shell berth started, another berth process's too, has its parent outside: the
   * engine's shim, berth itself; nothing a command starts can be parented outside), or a group of
   * its own that holds any. A process whose parent cannot be read counts. One that went meanwhile
   * holds nothing.
   */
  private holdsCommands(group: CgroupDir, shells: ReadonlySet<number>): boolean {
    let pids: number[];
    try {
      pids = group.procs();
    } catch (err) {
      if (errnoOf(err) === 'ENOENT') return false;
      throw err;
    }
    return pids.some((p) => !shells.has(p) && !this.startedFromOutside(p)) || group.children('').some((c) => !c.isEmpty());
  }

  /** Whether host process `hostPid`'s parent is outside the sandbox (false when it cannot be read). */
  private startedFromOutside(hostPid: number): boolean {
    let stat: string;
    try {
      stat = readFileSync(`/proc/${hostPid}/stat`, 'latin1');
    } catch {
      return false;
    }
    const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
    if (!Number.isInteger(ppid) || ppid <= 0) return false;
    const path = cgroupsOf(ppid)?.unified;
    return path !== undefined && !this.inSandbox(path);
  }

  /** Removes berth's groups that no process is in any more (ended jobs, a crashed berth's). */
  sweep(): void {
    for (const group of this.dir.children(GROUP_PREFIX)) group.remove();
  }

  /**
   * The host pid of the one process in the sandbox's own cgroup whose environment holds `entry`
   * (`NAME=value`, a tag berth gave it when it started it); undefined unless exactly one does
   * (a second one makes it refuse, never pick). Only berth's own processes are there: the warden,
   * helpers, shells before their first command (what commands start lives in their groups).
   */
  hostPidWithEnv(entry: string): number | undefined {
    const found: number[] = [];
    for (const hostPid of this.dir.procs()) {
      let environ: string;
      try {
        environ = readFileSync(`/proc/${hostPid}/environ`, 'latin1');
      } catch {
        continue;
      }
      if (environ.split('\0').includes(entry)) found.push(hostPid);
    }
    return found.length === 1 ? found[0] : undefined;
  }

  /**
   * The host pid of the process the sandbox sees as `pid` (as berth's own code there reported it,
   * bwrap's init loop), among the processes in the sandbox's own cgroup, where a new process
   * starts; undefined unless exactly one matches.
   */
  hostPidOf(pid: number): number | undefined {
    const found: number[] = [];
    for (const hostPid of this.dir.procs()) {
      let status: string;
      try {
        status = readFileSync(`/proc/${hostPid}/status`, 'latin1');
      } catch {
        continue;
      }
      if (parseNsPids(status)[this.opts.pidLevel] === pid) found.push(hostPid);
    }
    return found.length === 1 ? found[0] : undefined;
  }
}
