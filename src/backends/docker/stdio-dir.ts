import { randomBytes } from 'node:crypto';
import { mkdirSync, readdirSync, rmSync, statSync } from 'node:fs';
import path from 'node:path';
import type Dockerode from 'dockerode';

/*
 * A docker sandbox's stdio dir: a host dir of its own, bound read-only into its container, where
 * berth makes the FIFOs its processes' stdio go through (see `spawnOverFifos`). Inside, no process
 * can make, remove or replace a file there; on the host only berth writes it.
 */

/** Where a container sees its stdio dir. */
export const STDIO_DIR = '/run/berth-stdio';
/** Label naming a container's stdio dir (fixed at create): its id under `stdioRoot`. */
export const STDIO_LABEL = 'berth.stdio';

const ID = /^[0-9a-f]{16}$/;

/** Host root of the stdio dirs: `$berthHome/sandboxes/docker/.stdio`. */
export function stdioRoot(sandboxesRoot: string): string {
  return path.join(sandboxesRoot, '.stdio');
}

/** A new, empty stdio dir for a container about to be created. */
export function makeStdioDir(sandboxesRoot: string): { id: string; dir: string } {
  const root = stdioRoot(sandboxesRoot);
  // Its parents private as the rest of berth's home (a bind's source needs no way through them).
  mkdirSync(sandboxesRoot, { recursive: true, mode: 0o700 });
  mkdirSync(root, { recursive: true, mode: 0o711 });
  const id = randomBytes(8).toString('hex');
  const dir = path.join(root, id);
  mkdirSync(dir, { mode: 0o755 });
  return { id, dir };
}

/** Removes a stdio dir by its id (a label's value; anything else is ignored). Never throws. */
export function removeStdioDir(sandboxesRoot: string, id: string | undefined): void {
  if (id === undefined || !ID.test(id)) return;
  try {
    // A batch of FIFOs being made meanwhile can fail one pass (ENOTEMPTY); what stays, the sweep takes.
    rmSync(path.join(stdioRoot(sandboxesRoot), id), { recursive: true, force: true, maxRetries: 2 });
  } catch {
    // Left to the orphan reaper's sweep.
  }
}

/**
 * The host dir behind a running container's stdio dir, when berth can use it from here: the
 * container carries the label, binds a dir at STDIO_DIR read-only, and that dir, seen through the
 * container's main process (`/proc/PID/root`), is the very one under this berth's root (same
 * device and inode). A container of an older berth, or one on a remote engine or in a VM, is not:
 * why not, and its processes' stdio goes through the engine's attach instead.
 */
export function usableStdioDir(sandboxesRoot: string, info: Dockerode.ContainerInspectInfo): { dir: string } | { unavailable: string } {
  const id = info.Config.Labels?.[STDIO_LABEL];
  if (id === undefined || !ID.test(id)) return { unavailable: 'the container has no stdio dir (made by an older berth)' };
  const bind = (info.Mounts ?? []).find((m) => m.Type === 'bind' && m.Destination === STDIO_DIR);
  if (bind === undefined || bind.RW !== false) return { unavailable: `the container does not bind its stdio dir read-only at ${STDIO_DIR}` };
  const pid = info.State?.Pid ?? 0;
  if (!info.State?.Running || !(pid > 0)) return { unavailable: 'the container is not running' };
  const dir = path.join(stdioRoot(sandboxesRoot), id);
  try {
    const here = statSync(dir);
    const there = statSync(`/proc/${pid}/root${STDIO_DIR}`);
    if (here.dev !== there.dev || here.ino !== there.ino) return { unavailable: 'the container\'s stdio dir is not the one on this host (a remote engine, or one in a VM)' };
  } catch (err) {
    return { unavailable: `its stdio dir cannot be seen from here (${(err as NodeJS.ErrnoException).code ?? String(err)})` };
  }
  return { dir };
}

/**
 * Removes the stdio dirs older than `olderThanMs` whose id no container in `ids` carries: left by
 * a container removed out of band, or by a berth that exited between making a dir and creating
 * its container. Young dirs are kept (a container may be being created for one). Never throws.
 */
export function sweepStdioDirs(sandboxesRoot: string, ids: ReadonlySet<string>, olderThanMs: number, now = Date.now()): number {
  const root = stdioRoot(sandboxesRoot);
  let names: string[];
  try {
    names = readdirSync(root);
  } catch {
    return 0;
  }
  let removed = 0;
  for (const name of names) {
    if (!ID.test(name) || ids.has(name)) continue;
    try {
      if (now - statSync(path.join(root, name)).mtimeMs < olderThanMs) continue;
      rmSync(path.join(root, name), { recursive: true, force: true });
      removed++;
    } catch {
      // Gone meanwhile.
    }
  }
  return removed;
}
