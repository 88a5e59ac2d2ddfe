import { closeSync, constants, lstatSync, mkdirSync, openSync, readdirSync, readFileSync, readlinkSync, renameSync, rmSync, writeSync } from 'node:fs';
import { join } from 'node:path';

/*
 * What berth writes next to a sandbox's dirs, in `<root>/sandboxes/<name>/` (berth's own dir: the
 * sandbox's uid cannot write there, and nothing of it is bound into the sandbox):
 *
 *   meta.json            installation, digest, lifecycle: the "labels" the reapers list by
 *   holders/<host pid>   one per running bwrap over these dirs (each berth process runs its own):
 *                        the pid namespace of its pid 1, so another process can end it by that pid
 *                        without ever signalling a reused pid
 */

/** A sandbox's labels, as `listManaged` reports them. */
export interface SandboxMeta {
  installation: string;
  digest: string;
  ephemeral: boolean;
  /** The identity's readable dir name (scope/naming.ts), for people. */
  name: string;
  /** A warm-pool sandbox not claimed yet: its pool's shape and the broker that made it (its digest is ''). */
  pool?: { shape: string; owner: string } | undefined;
}

/** Writes `meta.json` (once: a sandbox's labels never change, but at a warm-pool claim: `claimMeta`). */
export function writeMeta(dir: string, meta: SandboxMeta): void {
  let fd: number;
  try {
    fd = openSync(join(dir, 'meta.json'), constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, 0o600);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'EEXIST') return;
    throw err;
  }
  try {
    writeSync(fd, JSON.stringify(meta));
  } finally {
    closeSync(fd);
  }
}

/**
 * Gives a warm-pool sandbox its identity: `meta.json` replaced at once (a new file renamed over
 * it), so a reaper reads either the pool's labels or the identity's, never a half-written file.
 */
export function claimMeta(dir: string, meta: SandboxMeta): void {
  const tmp = join(dir, `.meta-${process.pid}.json`);
  rmSync(tmp, { force: true });
  const fd = openSync(tmp, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, 0o600);
  try {
    writeSync(fd, JSON.stringify(meta));
  } finally {
    closeSync(fd);
  }
  renameSync(tmp, join(dir, 'meta.json'));
}

/** The labels of the sandbox at `dir`, or undefined when it has none (not berth's, or half made). */
export function readMeta(dir: string): SandboxMeta | undefined {
  try {
    const fd = openSync(join(dir, 'meta.json'), constants.O_RDONLY | constants.O_NOFOLLOW);
    let text: string;
    try {
      text = readFileSync(fd, 'utf8');
    } finally {
      closeSync(fd);
    }
    const m = JSON.parse(text) as Partial<SandboxMeta>;
    if (typeof m.installation !== 'string' || typeof m.digest !== 'string' || typeof m.ephemeral !== 'boolean' || typeof m.name !== 'string') return undefined;
    const pool = m.pool !== undefined && typeof m.pool.shape === 'string' && typeof m.pool.owner === 'string' ? { shape: m.pool.shape, owner: m.pool.owner } : undefined;
    return { installation: m.installation, digest: m.digest, ephemeral: m.ephemeral, name: m.name, ...(pool === undefined ? {} : { pool }) };
  } catch {
    return undefined;
  }
}

/** Records a running bwrap over `dir`: the host pid of its pid 1 and that pid's namespace. */
export function addHolder(dir: string, hostPid: number, pidNs: string): void {
  const holders = join(dir, 'holders');
  mkdirSync(holders, { mode: 0o700, recursive: true });
  const fd = openSync(join(holders, String(hostPid)), constants.O_WRONLY | constants.O_CREAT | constants.O_TRUNC | constants.O_NOFOLLOW, 0o600);
  try {
    writeSync(fd, pidNs);
  } finally {
    closeSync(fd);
  }
}

export function dropHolder(dir: string, hostPid: number): void {
  rmSync(join(dir, 'holders', String(hostPid)), { force: true });
}

/** Host pids of the sandbox's pid 1s that still run in the pid namespace they were recorded with. */
export function liveHolders(dir: string): number[] {
  let names: string[];
  try {
    names = readdirSync(join(dir, 'holders'));
  } catch {
    return [];
  }
  const live: number[] = [];
  for (const name of names) {
    if (!/^\d+$/.test(name)) continue;
    const pid = Number(name);
    let recorded: string;
    try {
      recorded = readFileSync(join(dir, 'holders', name), 'utf8');
    } catch {
      continue;
    }
    if (pidNsOf(pid) === recorded) live.push(pid);
    else dropHolder(dir, pid);
  }
  return live;
}

/** `pid:[inode]` of the process at host pid `pid`, or undefined when there is none (or a zombie). */
export function pidNsOf(pid: number): string | undefined {
  try {
    return readlinkSync(`/proc/${pid}/ns/pid`);
  } catch {
    return undefined;
  }
}

/**
 * Ends every bwrap over `dir`, whichever berth process started it: SIGKILL to each pid 1 still in
 * its recorded pid namespace (the kernel then kills the rest of that namespace), and waits until
 * they are gone (bounded).
 */
export async function killHolders(dir: string, waitMs = 5_000): Promise<void> {
  const pids = liveHolders(dir);
  for (const pid of pids) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // Gone meanwhile.
    }
  }
  const deadline = Date.now() + waitMs;
  while (Date.now() < deadline && liveHolders(dir).length > 0) await new Promise((r) => setTimeout(r, 10));
}

/** True when `dir` is a real dir (not a link). */
export function isRealDir(dir: string): boolean {
  try {
    return lstatSync(dir).isDirectory();
  } catch {
    return false;
  }
}
