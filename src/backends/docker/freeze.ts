import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { BerthError, TimeoutError } from '../../errors.js';
import { ownerAlive, ownerToken } from '../../kit/process-owner.js';
import type { CgroupDir } from '../cgroups/cgroup-dir.js';

/*
 * A container frozen by berth itself while a snapshot reads it: its own cgroup's `cgroup.freeze`,
 * where berth manages the container's groups from this host. A file write and a wait of a few
 * ms, where the engine's pause and unpause are a request each (~27 ms each here). The wait covers
 * every group below it (see `CgroupDir.subtreeFrozen`). The engine does not know the container
 * is frozen: a marker (`.frozen/<container id>` under the docker sandboxes' root, holding the
 * freezing process's `pid:starttime`) says who froze it, and a berth that finds the container
 * frozen by a process that is gone (it died mid-snapshot) thaws it when it next takes the sandbox
 * (`thawLeftFrozen`).
 */

/** How long the kernel may take to stop every process of the container (one in uninterruptible sleep waits). */
export const FREEZE_WAIT_MS = 10_000;

function markerOf(sandboxesRoot: string, containerId: string): string {
  return path.join(sandboxesRoot, '.frozen', containerId);
}

/**
 * Runs `fn` with every process of the container frozen, and thaws it after, whatever `fn` did.
 * The marker is written before the freeze and removed after the thaw.
 */
export async function whileFrozen<T>(group: CgroupDir, sandboxesRoot: string, containerId: string, what: string, fn: () => Promise<T>): Promise<T> {
  const marker = markerOf(sandboxesRoot, containerId);
  mkdirSync(path.dirname(marker), { recursive: true, mode: 0o700 });
  writeFileSync(marker, `${ownerToken()}\n`, { mode: 0o600 });
  let thawed = false;
  try {
    try {
      group.freeze(true);
    } catch (err) {
      throw new BerthError('transfer_failed', `could not ${what}: the processes of container ${containerId.slice(0, 12)} could not be frozen ` +
        `(${(err as NodeJS.ErrnoException).code ?? String(err)}: it stopped meanwhile?); nothing was read`, { cause: err });
    }
    try {
      if (!(await group.subtreeFrozen(FREEZE_WAIT_MS))) {
        throw new TimeoutError(`could not ${what}: the processes of container ${containerId.slice(0, 12)} were not all stopped within ${FREEZE_WAIT_MS} ms (one in uninterruptible sleep?); nothing was read`);
      }
      return await fn();
    } finally {
      group.freeze(false);
      thawed = true;
    }
  } finally {
    // A thaw that failed keeps the marker: the next berth to take the sandbox thaws it.
    if (thawed || !group.freezeSet) rmSync(marker, { force: true });
  }
}

/**
 * Thaws a running container whose cgroup a berth process froze and then died before thawing it
 * (its marker names a process that is gone); one the engine paused, or one a live berth process
 * froze (a snapshot under way), is left as it is. True when it thawed it.
 */
export function thawLeftFrozen(group: CgroupDir, sandboxesRoot: string, containerId: string, pausedByEngine: boolean): boolean {
  if (pausedByEngine) return false;
  const marker = markerOf(sandboxesRoot, containerId);
  let owner: string;
  try {
    owner = readFileSync(marker, 'utf8').trim();
  } catch {
    return false;
  }
  if (ownerAlive(owner)) return false;
  const frozen = group.freezeSet;
  if (frozen) group.freeze(false);
  rmSync(marker, { force: true });
  return frozen;
}

/** Removes a container's marker (the container is gone). */
export function dropFrozenMarker(sandboxesRoot: string, containerId: string): void {
  rmSync(markerOf(sandboxesRoot, containerId), { force: true });
}
