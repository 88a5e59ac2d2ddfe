import { lstatSync, readFileSync, statSync } from 'node:fs';
import type Dockerode from 'dockerode';
import { cgroupsOf } from '../cgroups/cgroup-host.js';
import { usableStdioDir } from './stdio-dir.js';

/*
 * A running container's tmpfs dirs as berth on the engine's host sees them: under
 * `/proc/PID/root` of its main process, where the kernel shows the container's own mounts. A
 * snapshot copies a sandbox's tmpfs home and workspace from there, each by one `cp -a` on the
 * host instead of a tar process the engine starts in the container (~90 ms an exec here).
 *
 * Only with the container frozen (every process in its cgroup and below): a path under
 * `/proc/PID/root` is resolved on the host, so a link the sandbox made would be followed to the
 * host's files. Frozen, no process of the sandbox runs; the dir itself is checked to be a dir
 * (never a link) and a mount of its own, and `cp -a` follows no link below it.
 */

/** Why berth cannot use the container's dirs from this host, or the root they are under. */
export type HostView = { root: string; pid: number; containerId: string } | { unavailable: string };

/**
 * The root under which this host sees the container's dirs: where its stdio dir proves the
 * engine and its processes are on this host (see usableStdioDir) and its user namespace is the
 * host's (the owners cp keeps are then the sandbox's own, as a tar in the sandbox would keep them).
 */
export function hostViewOf(sandboxesRoot: string, info: Dockerode.ContainerInspectInfo): HostView {
  const stdio = usableStdioDir(sandboxesRoot, info);
  if ('unavailable' in stdio) return stdio;
  const root = `/proc/${info.State.Pid}/root`;
  try {
    for (const map of ['uid_map', 'gid_map']) {
      const text = readFileSync(`/proc/${info.State.Pid}/${map}`, 'utf8').trim();
      if (!/^0\s+0\s+4294967295$/.test(text)) return { unavailable: `the container runs in a user namespace of its own (${map}: ${text.split('\n')[0] ?? ''})` };
    }
  } catch (err) {
    return { unavailable: `its user namespace cannot be read (${(err as NodeJS.ErrnoException).code ?? String(err)})` };
  }
  return { root, pid: info.State.Pid, containerId: info.Id };
}

/**
 * `target` (an absolute path in the container, one level below its root) under `root` when it is
 * a dir of its own mount there (a tmpfs, as berth made it), else why not. The caller holds the
 * container frozen.
 */
export function viewedDir(view: { root: string; pid: number; containerId: string }, target: string): { dir: string } | { unavailable: string } {
  if (!/^\/[^/]+$/.test(target)) return { unavailable: `${target} is not a top-level dir` };
  const { root } = view;
  const dir = `${root}${target}`;
  try {
    // Still the container's process (a pid of a container removed meanwhile may be another's).
    if (cgroupsOf(view.pid)?.unified?.includes(view.containerId) !== true) return { unavailable: `process ${view.pid} is no longer the container's` };
    const st = lstatSync(dir);
    if (!st.isDirectory()) return { unavailable: `${target} is not a dir in the container` };
    if (st.dev === statSync(root).dev) return { unavailable: `${target} is not a mount of its own in the container` };
  } catch (err) {
    return { unavailable: `${target} cannot be seen from here (${(err as NodeJS.ErrnoException).code ?? String(err)})` };
  }
  return { dir };
}
