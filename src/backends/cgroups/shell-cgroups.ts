import { readFileSync } from 'node:fs';
import { BerthError } from '../../errors.js';
import type { ShellGroups } from '../../shell/transport.js';
import type { Logger } from '../../logging/logger.js';
import { closeQuietly, listIsOnly, signal, type CgroupDir } from './cgroup-dir.js';

/** How long a stopped shell may take to show as stopped when its group would not freeze. */
const STOP_WAIT_MS = 1_000;

/** How many groups a shell holds on to before it looks which of them have emptied. */
const PRUNE_AT = 64;

/** A sandbox counts as out of pids this close to its limit (as the warden counts it). */
const PIDS_HEADROOM = 8;

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** What a shell's groups need of its sandbox's cgroups (`SandboxCgroups`). */
export interface ShellGroupsHost {
  /** How long a kill waits for a group to empty. */
  readonly waitMs: number;
  readonly log: Logger;
  /** Whether host process `hostPid` is one of the sandbox's. */
  holds(hostPid: number): boolean;
  /** A new group (named, or with a random name) with host process `hostPid` moved into it. */
  moveToNew(hostPid: number, name?: string): CgroupDir;
  /** The sandbox's pids in use and limit, where a pids cgroup bounds it. */
  pidsInUse(): { current: number; max: number } | undefined;
}

/**
 * One shell's command groups (see `ShellGroups`). The shell stays in its group while the commands
 * it runs leave nothing behind, so a command costs one read of the group's process list; after one
 * that left a process (an earlier `cmd &`, a daemon) it moves to a fresh group before the next.
 */
export class CgroupShell implements ShellGroups {
  /** The group the shell is in; undefined once it was taken out to end (a timeout). */
  private current: CgroupDir | undefined;
  /** The current group's process list, kept open. */
  private procsFd: number | undefined;
  /** The current group was named by its command (a job's): the shell leaves it after the command. */
  private named = false;
  /** A move failed while the group held other processes: killing it would take them too. */
  private shared = false;
  /** Every group this shell made and has not seen removed. */
  private readonly made = new Set<CgroupDir>();
  /** `made` is pruned when it grows past this. */
  private pruneAt = PRUNE_AT;
  /** The process list of a group that holds the shell alone, and room to read one. */
  private readonly alone: Buffer;
  private readonly readBuf = Buffer.alloc(64);

  constructor(
    private readonly sandbox: ShellGroupsHost,
    /** The shell's pid on the host. */
    readonly hostPid: number,
  ) {
    this.alone = Buffer.from(`${hostPid}\n`, 'latin1');
  }

  prepare(name?: string): void {
    if (name === undefined && this.current !== undefined && !this.named && !this.shared && !this.othersInCurrent()) return;
    this.move(name);
  }

  settle(): void {
    if (this.named) this.move(undefined);
  }

  async timeout(): Promise<{ killed: number; shell: 'cont' | 'killed' | 'gone'; stillFull: boolean }> {
    const group = this.current;
    if (group === undefined || this.shared) throw new BerthError('internal', 'the shell has no process group of its own to end');
    const waitMs = this.sandbox.waitMs;
    // Frozen, nothing in the group runs or forks, the shell included; a group that does not
    // freeze in time (a process in the kernel's uninterruptible sleep) is still killed whole.
    group.freeze(true);
    const frozen = await group.frozen(waitMs);
    const stillFull = this.stillFull(group);
    let shell: 'cont' | 'killed' | 'gone' = 'gone';
    if (this.sandbox.holds(this.hostPid) && signal(this.hostPid, 'SIGSTOP')) {
      // Stopped before it leaves: out of the frozen group it would run on, and fork outside it.
      if (!frozen) await this.stopped(STOP_WAIT_MS);
      try {
        this.move(undefined);
        shell = 'cont';
      } catch (err) {
        // It could not leave: it ends with the group, without saving its state.
        this.sandbox.log.debug(`cgroups: the shell could not leave ${group.path}: ${String(err)}`);
        this.leave();
        shell = 'killed';
      }
    } else {
      this.leave();
    }
    const killed = await group.kill(waitMs);
    if (group.remove()) this.made.delete(group);
    if (shell === 'cont') {
      // As the warden does it (warden-script.ts `t`): the trap dumps the shell's state and exits.
      signal(this.hostPid, 'SIGUSR1');
      if (this.catchesUsr1()) shell = signal(this.hostPid, 'SIGCONT') ? 'cont' : 'gone';
      else shell = signal(this.hostPid, 'SIGKILL') ? 'killed' : 'gone';
    }
    this.sandbox.log.debug(`cgroups: timeout killed ${killed} process(es) of ${group.path}; the shell was ${shell}`);
    return { killed, shell, stillFull };
  }

  async endCommand(): Promise<number> {
    const group = this.current;
    if (group === undefined || this.shared) return 0;
    this.leave();
    const killed = await group.kill(this.sandbox.waitMs);
    if (group.remove()) this.made.delete(group);
    return killed;
  }

  async endAll(): Promise<number> {
    this.leave();
    let killed = 0;
    for (const group of [...this.made]) {
      if (group.exists) killed += await group.kill(this.sandbox.waitMs);
      if (group.remove()) this.made.delete(group);
    }
    return killed;
  }

  release(): void {
    this.leave();
    for (const group of [...this.made]) if (group.remove()) this.made.delete(group);
  }

  /** Whether a process other than the shell is in its group (one read: see `listIsOnly`). */
  private othersInCurrent(): boolean {
    return this.procsFd === undefined || !listIsOnly(this.procsFd, this.readBuf, this.alone);
  }

  /**
   * Moves the shell to a new group (named, or not); the group it leaves goes if it is empty. Its
   * earlier groups are looked at again only when it has made many (those whose processes all
   * ended go), so a move costs the same however many it made.
   */
  private move(name: string | undefined): void {
    if (!this.sandbox.holds(this.hostPid)) {
      this.shared = this.current !== undefined;
      throw new BerthError('internal', `the shell (host pid ${this.hostPid}) is no longer a process of the sandbox`);
    }
    let group: CgroupDir;
    try {
      group = this.sandbox.moveToNew(this.hostPid, name);
    } catch (err) {
      this.shared = this.current !== undefined && this.othersInCurrent();
      throw err;
    }
    const left = this.current;
    this.leave();
    this.current = group;
    this.made.add(group);
    this.procsFd = group.openProcs();
    this.named = name !== undefined;
    this.shared = false;
    // The group left behind holds what its command left running (or nothing, and goes now); the
    // rest of the shell's groups go when their processes have ended: at release, or the orphan pass.
    if (left?.remove() === true) this.made.delete(left);
    if (this.made.size > this.pruneAt) {
      for (const g of [...this.made]) if (g !== group && g.remove()) this.made.delete(g);
      this.pruneAt = Math.max(PRUNE_AT, 2 * this.made.size);
    }
  }

  private leave(): void {
    closeQuietly(this.procsFd);
    this.procsFd = undefined;
    this.current = undefined;
    this.named = false;
  }

  /** Out of pids before, and still without the group's threads (counted while it is frozen). */
  private stillFull(group: CgroupDir): boolean {
    const pids = this.sandbox.pidsInUse();
    if (pids === undefined || pids.current + PIDS_HEADROOM < pids.max) return false;
    let threads = 0;
    try {
      threads = group.threadCount();
    } catch {
      // Unreadable: counted as holding none, so the sandbox reads as full (the careful answer).
    }
    return pids.current - threads + PIDS_HEADROOM >= pids.max;
  }

  private async stopped(ms: number): Promise<void> {
    const deadline = Date.now() + ms;
    while (Date.now() < deadline) {
      try {
        const stat = readFileSync(`/proc/${this.hostPid}/stat`, 'latin1');
        if (/^[TtZX]/.test(stat.slice(stat.lastIndexOf(')') + 2))) return;
      } catch {
        return;
      }
      await sleep(2);
    }
  }

  /** Whether the shell still catches SIGUSR1 (berth's trap), from its `SigCgt:` mask. */
  private catchesUsr1(): boolean {
    try {
      const m = /^SigCgt:\s*([0-9a-f]+)$/m.exec(readFileSync(`/proc/${this.hostPid}/status`, 'latin1'));
      return m !== null && (BigInt(`0x${m[1] ?? '0'}`) & 0x200n) !== 0n;
    } catch {
      return false;
    }
  }
}
