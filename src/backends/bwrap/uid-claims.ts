import { createHash, randomBytes } from 'node:crypto';
import { closeSync, linkSync, lstatSync, openSync, readFileSync, readdirSync, renameSync, rmSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { BerthError } from '../../errors.js';

/*
 * One host uid per sandbox, from a range the operator gives berth (uids no account on the host
 * uses). Why not one uid for every sandbox: the kernel counts some limits per uid across user
 * namespaces (inotify instances, the process count of RLIMIT_NPROC at the host level, pending
 * signals), so with one uid a sandbox could starve the others; and should a sandbox ever get out
 * of its mount namespace, another sandbox's 0700 dirs still belong to another uid.
 *
 * A claim is a file `<claims>/<uid>` created with O_EXCL, holding the absolute path of the
 * sandbox dir it belongs to, so two berth processes (or installations sharing a claims dir) never
 * hand out one uid twice. The sandbox's own dirs, owned by that uid, record which uid it has.
 */

export interface UidRange {
  first: number;
  count: number;
}

/** A uid of the range is never root or nobody and fits in 31 bits (some tools read uids as signed). */
export function checkUidRange(range: UidRange): string | undefined {
  if (!Number.isInteger(range.first) || !Number.isInteger(range.count) || range.count < 1) return 'first and count must be whole numbers, count at least 1';
  if (range.first < 1000) return `the range starts at ${range.first}, among system accounts; start at 100000 or above`;
  if (range.first + range.count > 2 ** 31 - 1) return 'the range goes past 2147483646 (uids above it are read as negative by some tools)';
  if (range.first <= 65534 && range.first + range.count > 65534) return 'the range includes 65534 (nobody)';
  return undefined;
}

/**
 * Claims a free uid of `range` for the sandbox at `owner` (an absolute path). Starts at a point
 * derived from `owner` so concurrent claims rarely collide. Throws when the range is full.
 */
export function claimUid(claimsDir: string, range: UidRange, owner: string): number {
  const start = createHash('sha256').update(owner).digest().readUInt32BE(0) % range.count;
  for (let i = 0; i < range.count; i++) {
    const uid = range.first + ((start + i) % range.count);
    let fd: number;
    try {
      fd = openSync(join(claimsDir, String(uid)), 'wx', 0o600);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'EEXIST') continue;
      throw err;
    }
    try {
      writeSync(fd, owner);
    } finally {
      closeSync(fd);
    }
    return uid;
  }
  throw new BerthError(
    'backend_unavailable',
    `every uid of the bwrap uid range ${range.first}..${range.first + range.count - 1} is taken by a sandbox; ` +
      'remove sandboxes that are no longer needed (berth rm) or give berth a larger range',
  );
}

/** The sandbox dir that holds `uid`, or undefined when it is free. */
export function claimOwner(claimsDir: string, uid: number): string | undefined {
  try {
    return readFileSync(join(claimsDir, String(uid)), 'utf8');
  } catch {
    return undefined;
  }
}

/**
 * Releases `uid` if `owner` holds it (after its sandbox's dirs are gone). A claim that belongs to
 * someone else is left alone.
 */
export function releaseUid(claimsDir: string, uid: number, owner: string): void {
  const path = join(claimsDir, String(uid));
  if (claimOwner(claimsDir, uid) !== owner) return;
  // Take the file away first, then look: whatever was claimed after our look is put back.
  const taken = `${path}.release-${randomBytes(6).toString('hex')}`;
  try {
    renameSync(path, taken);
  } catch {
    return;
  }
  if (readFileSync(taken, 'utf8') !== owner) {
    try {
      linkSync(taken, path);
    } catch {
      // Claimed again meanwhile: that claim stands.
    }
  }
  rmSync(taken, { force: true });
}

/** A claim this young may belong to a sandbox whose dirs are being made right now. */
const FRESH_CLAIM_MS = 60_000;

/**
 * Releases claims whose sandbox dir no longer exists (a berth that died between claim and
 * removal), among those whose owner is under `sandboxesDir` and older than a minute. Returns the
 * uids released.
 */
export function releaseStaleClaims(claimsDir: string, sandboxesDir: string, nowMs = Date.now()): number[] {
  const released: number[] = [];
  for (const name of readdirSync(claimsDir)) {
    if (!/^\d+$/.test(name)) continue;
    const uid = Number(name);
    const owner = claimOwner(claimsDir, uid);
    if (owner === undefined || !owner.startsWith(`${sandboxesDir}/`)) continue;
    try {
      if (nowMs - lstatSync(join(claimsDir, name)).mtimeMs < FRESH_CLAIM_MS) continue;
    } catch {
      continue;
    }
    try {
      lstatSync(owner);
      continue;
    } catch {
      releaseUid(claimsDir, uid, owner);
      released.push(uid);
    }
  }
  return released;
}
