import { randomBytes } from 'node:crypto';
import { chmodSync, chownSync, closeSync, constants, readdirSync, rmSync, statSync } from 'node:fs';
import { Socket } from 'node:net';
import { join } from 'node:path';
import { makeFifos, openFifo } from './fifo-files.js';

/*
 * The FIFOs of one spawned process (its stdio, and its wrapper's status), made on the host in a
 * dir the sandbox sees read-only: bwrap's run dir, a docker container's stdio dir.
 */

export interface FifoSet {
  /** The name the init loop opens them by (`<id>.0 .1 .2`). */
  id: string;
  stdin: string;
  stdout: string;
  stderr: string;
  /** The wrapper writes the exit status here; EOF without one means it was killed. */
  status: string;
}

/** Host ends of one process's stdio, opened before the process opens its own. */
export interface HostEnds {
  stdin: Socket | undefined;
  stdout: Socket;
  stderr: Socket;
  status: Socket;
}

/** FIFO sets made per mkfifo run: starting a process costs tens of ms on a busy host, so not one per spawn. */
const BATCH = 8;

/**
 * FIFO sets made ahead, in batches, in one sandbox's dir, owned by the sandbox's uid so its
 * processes can open them (or, where berth cannot know the uid the engine maps them to, opened to
 * every uid when taken: `openMode` 0o666, in a dir only that one sandbox sees). They wait with
 * mode 0000 and are opened up only when taken: the dir is read-only inside, so no process there
 * can open (or chmod) a FIFO of a process not started yet and keep it to read that process's
 * output or write to its stdin later. Each set is used once: a process left over from an earlier
 * spawn may still hold a FIFO open.
 */
export class FifoPool {
  private readonly ready: FifoSet[] = [];
  private refilling: Promise<void> | undefined;
  private closed = false;

  constructor(
    private readonly dir: string,
    /** The uid:gid its FIFOs are made for (undefined: berth's own). */
    readonly owner: { uid: number; gid: number } | undefined,
    private readonly openMode = 0o600,
  ) {}

  /**
   * A fresh set, opened up for its one use; refills in the background when few are left. A set
   * whose files went meanwhile (another process's sweep of stale sets, see `sweepStaleFifos`) is
   * passed over.
   */
  async take(): Promise<FifoSet> {
    for (;;) {
      const set = this.ready.shift();
      if (this.ready.length < BATCH / 2) void this.refill().catch(() => undefined);
      if (set !== undefined) {
        try {
          for (const p of [set.stdin, set.stdout, set.stderr, set.status]) chmodSync(p, this.openMode);
        } catch (err) {
          if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
          unlinkFifos(set);
          continue;
        }
        return set;
      }
      await this.refill();
    }
  }

  /**
   * Has a batch ready (call while the sandbox starts): makes one unless enough sets wait already (a
   * pool kept from the sandbox's earlier start in this process).
   */
  prime(): Promise<void> {
    return this.ready.length >= BATCH / 2 ? this.refilling ?? Promise.resolve() : this.refill();
  }

  /**
   * Resolves once no batch is being made, the pool staying usable (its sandbox stopped, its dir
   * and pool kept for the next start).
   */
  async settle(): Promise<void> {
    await this.refilling?.catch(() => undefined);
  }

  /**
   * No batch is made from now on, and the one being made has ended when this resolves: no FIFO
   * appears in the run dir after it, so the dir can be removed. The sets still waiting are
   * removed: no other process takes them (each makes its own), and every process that uses a
   * sandbox (a CLI call each) would otherwise leave most of a batch in its dir.
   */
  async close(): Promise<void> {
    this.closed = true;
    await this.refilling?.catch(() => undefined);
    for (const set of this.ready.splice(0)) unlinkFifos(set);
  }

  private refill(): Promise<void> {
    if (this.closed) return Promise.reject(new Error(`the FIFO pool of ${this.dir} is closed: its sandbox stopped`));
    this.refilling ??= this.makeBatch().finally(() => {
      this.refilling = undefined;
    });
    return this.refilling;
  }

  private async makeBatch(): Promise<void> {
    const sets: FifoSet[] = [];
    for (let i = 0; i < BATCH; i++) {
      const id = randomBytes(8).toString('hex');
      const at = (n: number): string => join(this.dir, `${id}.${n}`);
      sets.push({ id, stdin: at(0), stdout: at(1), stderr: at(2), status: at(3) });
    }
    const paths = sets.flatMap((s) => [s.stdin, s.stdout, s.stderr, s.status]);
    // One short helper per batch, on the host, outside the sandbox.
    await makeFifos(paths, '0000', `for sandbox processes in ${this.dir}`);
    if (this.owner !== undefined) for (const p of paths) chownSync(p, this.owner.uid, this.owner.gid);
    this.ready.push(...sets);
  }
}

/**
 * Opens berth's ends without blocking: stdout and stderr for reading (a writer is not there yet,
 * so nothing may read them before the process reported it runs: an early read would see EOF), and
 * stdin read-write, which Linux opens at once whether or not a reader is there. O_NOFOLLOW and the
 * FIFO check keep a planted link or file from being opened instead.
 */
export interface HostFds {
  stdin: number | undefined;
  stdout: number;
  stderr: number;
  status: number;
}

export function openHostEnds(set: FifoSet, withStdin: boolean): HostFds {
  const opened: number[] = [];
  const open = (path: string, flags: number): number => openFifo(path, flags | constants.O_NONBLOCK, opened);
  try {
    return {
      stdout: open(set.stdout, constants.O_RDONLY),
      stderr: open(set.stderr, constants.O_RDONLY),
      status: open(set.status, constants.O_RDONLY),
      stdin: withStdin ? open(set.stdin, constants.O_RDWR) : undefined,
    };
  } catch (err) {
    for (const fd of opened) closeSync(fd);
    throw err;
  }
}

/** Streams over opened host ends; call only once the process holds its own ends. */
export function streamsOf(fds: HostFds): HostEnds {
  return {
    status: new Socket({ fd: fds.status, readable: true, writable: false }),
    stdin: fds.stdin === undefined ? undefined : new Socket({ fd: fds.stdin, readable: false, writable: true }),
    stdout: new Socket({ fd: fds.stdout, readable: true, writable: false }),
    stderr: new Socket({ fd: fds.stderr, readable: true, writable: false }),
  };
}

/** Removes the FIFO files (open ends keep working). Never throws. */
export function unlinkFifos(set: FifoSet): void {
  for (const p of [set.stdin, set.stdout, set.stderr, set.status]) rmSync(p, { force: true });
}

/**
 * Sets made ahead this long ago and never taken are an earlier handle's (see `sweepStaleFifos`):
 * far longer than a taken set waits to be opened.
 */
export const STALE_FIFO_MS = 10 * 60_000;

/** FIFO file names as a pool makes them: `<16 hex>.<0-3>`. */
const FIFO_NAME = /^[0-9a-f]{16}\.[0-3]$/;

/**
 * Removes the FIFOs in `dir` older than `olderThanMs` (by their change time: a set's mode changes
 * when it is taken): the sets a pool made ahead and never used, left by a handle that went (its
 * sandbox stopped, hibernated, or berth exited). A set is used within seconds of being taken, so
 * nothing in use is that old. Only names a pool makes are touched. Never throws.
 */
export function sweepStaleFifos(dir: string, olderThanMs: number, now = Date.now()): number {
  let removed = 0;
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch {
    return 0;
  }
  for (const name of names) {
    if (!FIFO_NAME.test(name)) continue;
    const p = join(dir, name);
    try {
      const st = statSync(p);
      if (!st.isFIFO() || now - st.ctimeMs < olderThanMs) continue;
      rmSync(p, { force: true });
      removed++;
    } catch {
      // Gone meanwhile.
    }
  }
  return removed;
}
