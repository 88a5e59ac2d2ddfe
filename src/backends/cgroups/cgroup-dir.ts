import { closeSync, existsSync, mkdirSync, openSync, readdirSync, readFileSync, readSync, rmdirSync, writeFileSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';

/** How often a wait on a group's state looks again. */
const POLL_MS = 2;

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** An errno code of a failed fs call. */
export function errnoOf(err: unknown): string | undefined {
  return (err as NodeJS.ErrnoException | undefined)?.code;
}

/**
 * One cgroup2 directory and what berth does with it: make it, move a process in, list, freeze,
 * kill and remove. Paths are the host's (under the cgroup2 mount). Reads and writes are the
 * kernel's files, each a few microseconds, but for one: the first move of a process after the
 * host's cgroups were left alone for a while waits for the kernel (an RCU grace period, 15-40 ms
 * measured here), so a move that may be the first has an asynchronous form. The waits poll and are
 * bounded.
 */
export class CgroupDir {
  constructor(readonly path: string) {}

  /** Makes `name` under `parent`; fails when it exists. */
  static make(parent: string, name: string): CgroupDir {
    const path = join(parent, name);
    mkdirSync(path);
    return new CgroupDir(path);
  }

  get exists(): boolean {
    return existsSync(join(this.path, 'cgroup.procs'));
  }

  /** Moves process `pid` (a host pid) and all its threads into this group. */
  enter(pid: number): void {
    writeFileSync(join(this.path, 'cgroup.procs'), `${pid}\n`);
  }

  /** As `enter`, off berth's event loop (the kernel's wait happens on a worker thread). */
  enterAsync(pid: number): Promise<void> {
    return writeFile(join(this.path, 'cgroup.procs'), `${pid}\n`);
  }

  /** Host pids of its processes (zombies are not listed: they have left). */
  procs(): number[] {
    return pidsOf(readFileSync(join(this.path, 'cgroup.procs'), 'latin1'));
  }

  /** Its threads, as a pids limit counts them. */
  threadCount(): number {
    return pidsOf(readFileSync(join(this.path, 'cgroup.threads'), 'latin1')).length;
  }

  /** Opens its process list for `procsVia` (a shell's group is read before each command). */
  openProcs(): number {
    return openSync(join(this.path, 'cgroup.procs'), 'r');
  }

  /** Freezes or thaws every process in it; thawing a group that is gone is no error. */
  freeze(on: boolean): void {
    try {
      writeFileSync(join(this.path, 'cgroup.freeze'), on ? '1\n' : '0\n');
    } catch (err) {
      if (on || errnoOf(err) !== 'ENOENT') throw err;
    }
  }

  /** Whether it is set frozen (its `cgroup.freeze` says 1, whether or not every process stopped yet); a group that is gone is not. */
  get freezeSet(): boolean {
    try {
      return readFileSync(join(this.path, 'cgroup.freeze'), 'latin1').trim() === '1';
    } catch {
      return false;
    }
  }

  /** Waits until every process in it is frozen; false when that did not happen within `timeoutMs`. */
  async frozen(timeoutMs: number): Promise<boolean> {
    return this.until((e) => /^frozen 1$/m.test(e), timeoutMs);
  }

  /**
   * Waits until every process in it and in every group below it is frozen (it frozen, they
   * frozen by it); false when that did not happen within `timeoutMs`. A group's own `frozen 1`
   * speaks for its own processes only: one in a child group may still be inside a system call
   * (measured so: a write went on for hundreds of MiB after the parent said frozen). The groups
   * are listed again after each pass, so one made meanwhile is waited for too.
   */
  async subtreeFrozen(timeoutMs: number): Promise<boolean> {
    const deadline = Date.now() + timeoutMs;
    for (let seen = new Set<string>(); ;) {
      const groups = [this, ...this.descendants()];
      for (const g of groups) if (!(await g.frozen(Math.max(0, deadline - Date.now())))) return false;
      const paths = new Set(groups.map((g) => g.path));
      if (paths.size === seen.size && [...paths].every((p) => seen.has(p))) return true;
      seen = paths;
    }
  }

  /** Every group below it, at any depth (one that goes meanwhile is left out). */
  descendants(): CgroupDir[] {
    const out: CgroupDir[] = [];
    for (const child of this.children('')) out.push(child, ...child.descendants());
    return out;
  }

  /** No process is in it or below it (a group that is gone is empty). */
  isEmpty(): boolean {
    try {
      return /^populated 0$/m.test(readFileSync(join(this.path, 'cgroup.events'), 'latin1'));
    } catch (err) {
      if (errnoOf(err) === 'ENOENT') return true;
      throw err;
    }
  }

  /** Waits until no process is in it; false when some still were after `timeoutMs`. */
  async emptied(timeoutMs: number): Promise<boolean> {
    return this.until((e) => /^populated 0$/m.test(e), timeoutMs);
  }

  /**
   * SIGKILL to every process in it, processes forked meanwhile included, then waits (bounded) until
   * none is left. With `cgroup.kill` (Linux 5.14) the kernel does it in one step; without it, the
   * group is frozen first (nothing in it can fork), each process is killed, and it is thawed.
   * Frozen processes die of SIGKILL. Returns how many processes were in it.
   */
  async kill(timeoutMs: number): Promise<number> {
    let count: number;
    try {
      count = this.procs().length;
    } catch (err) {
      if (errnoOf(err) === 'ENOENT') return 0;
      throw err;
    }
    if (existsSync(join(this.path, 'cgroup.kill'))) {
      writeFileSync(join(this.path, 'cgroup.kill'), '1\n');
    } else {
      this.freeze(true);
      await this.frozen(timeoutMs);
      for (const pid of this.procs()) signal(pid, 'SIGKILL');
      this.freeze(false);
    }
    await this.emptied(timeoutMs);
    return count;
  }

  /** Removes it; false when it still holds a process (or a child group), true when it is gone. */
  remove(): boolean {
    try {
      rmdirSync(this.path);
      return true;
    } catch (err) {
      return errnoOf(err) === 'ENOENT';
    }
  }

  /** Its child groups whose names start with `prefix`. */
  children(prefix: string): CgroupDir[] {
    let names: string[];
    try {
      names = readdirSync(this.path, { withFileTypes: true }).filter((d) => d.isDirectory() && d.name.startsWith(prefix)).map((d) => d.name);
    } catch {
      return [];
    }
    return names.map((n) => new CgroupDir(join(this.path, n)));
  }

  private async until(test: (events: string) => boolean, timeoutMs: number): Promise<boolean> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      let events: string;
      try {
        events = readFileSync(join(this.path, 'cgroup.events'), 'latin1');
      } catch (err) {
        // A group that is gone holds nothing and freezes nothing.
        if (errnoOf(err) === 'ENOENT') return true;
        throw err;
      }
      if (test(events)) return true;
      if (Date.now() >= deadline) return false;
      await sleep(POLL_MS);
    }
  }
}

/**
 * Whether a process list, read through a descriptor kept open, is exactly `only` (`"<pid>\n"`):
 * one read into `buf` (longer than `only`), no open, close or allocation per look. The kernel
 * fills the read with as much of the list as fits, so a list of more than that one pid reads longer.
 */
export function listIsOnly(fd: number, buf: Buffer, only: Buffer): boolean {
  const n = readSync(fd, buf, 0, buf.length, 0);
  return n === only.length && buf.compare(only, 0, n, 0, n) === 0;
}

export function closeQuietly(fd: number | undefined): void {
  if (fd === undefined) return;
  try {
    closeSync(fd);
  } catch {
    // Already closed: nothing to release.
  }
}

/** Sends `sig` to host process `pid`; false when it is gone. */
export function signal(pid: number, sig: NodeJS.Signals): boolean {
  try {
    process.kill(pid, sig);
    return true;
  } catch {
    return false;
  }
}

function pidsOf(text: string): number[] {
  const out: number[] = [];
  for (const line of text.split('\n')) {
    const n = Number(line);
    if (line !== '' && Number.isInteger(n) && n > 0) out.push(n);
  }
  return out;
}
