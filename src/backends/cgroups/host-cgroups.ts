import { mkdirSync } from 'node:fs';
import { join, posix } from 'node:path';
import type { Logger } from '../../logging/logger.js';
import { CgroupDir } from './cgroup-dir.js';
import { cgroupsOf, groupsUnusableUnder, notWritable, probeCgroupHost, type CgroupHost } from './cgroup-host.js';
import { GROUP_PREFIX, SandboxCgroups } from './sandbox-cgroups.js';

/** How long a sandbox's removal waits for processes that were just killed to be gone. */
const EMPTY_WAIT_MS = 200;

/** How long the backend's close waits for its sandboxes' last processes (a warden ends within 1 s). */
const CLOSE_WAIT_MS = 1_500;

/** Removes a sandbox's cgroup and berth's groups in it; false when a process is in one. */
function removeTree(dir: CgroupDir): boolean {
  for (const group of dir.children(GROUP_PREFIX)) group.remove();
  return dir.remove();
}

/**
 * Cgroups for the sandboxes whose processes berth starts itself (bwrap, local): one per sandbox at
 * `<berth's own cgroup>/berth-<installation>/<sandbox>`, nested in berth's own so the limits of
 * the service berth runs as keep applying, with each command's group below it. Made on first use.
 *
 * @example
 * const host = HostCgroups.probe(installation, log);
 * if (!('unavailable' in host)) { const groups = host.sandbox('sb-4242', 1); groups.admit(pid); }
 */
export class HostCgroups {
  private constructor(
    private readonly host: CgroupHost,
    /** `<berth's own cgroup>/berth-<installation>`, as a path in the cgroup2 hierarchy. */
    private readonly root: string,
    private readonly log: Logger,
  ) {}

  /**
   * This process's place for its sandboxes' cgroups (made now), or why there is none (no cgroup2,
   * no rights, a kernel that cannot freeze a group).
   */
  static probe(installation: string, log: Logger): HostCgroups | { unavailable: string } {
    const probe = probeCgroupHost();
    if (!probe.ok) return { unavailable: probe.reason };
    const own = cgroupsOf('self')?.unified;
    if (own === undefined) return { unavailable: 'berth\'s own process is in no cgroup2 group' };
    const denied = notWritable(join(probe.host.unified, own));
    if (denied !== undefined) return { unavailable: denied };
    const root = posix.join(own, `berth-${installation.replace(/[^A-Za-z0-9]/g, '').slice(0, 12)}`);
    try {
      mkdirSync(join(probe.host.unified, root), { recursive: true });
    } catch (err) {
      return { unavailable: `berth could not make the cgroup ${root}: ${String(err)}` };
    }
    const why = groupsUnusableUnder(join(probe.host.unified, root));
    if (why !== undefined) return { unavailable: why };
    return new HostCgroups(probe.host, root, log);
  }

  /**
   * The groups of sandbox `name` (a directory name), made if missing. `pidLevel`: the `NSpid`
   * column of the sandbox's pids (0: berth's own pid namespace).
   */
  sandbox(name: string, pidLevel: number): SandboxCgroups {
    const base = posix.join(this.root, name);
    mkdirSync(join(this.host.unified, base), { recursive: true });
    return new SandboxCgroups({ host: this.host, base, pidLevel, ownBase: true, log: this.log });
  }

  /**
   * Removes a sandbox's cgroup (with berth's groups in it) once no process is in it: processes that
   * were just killed are waited for (bounded); false when one still runs (a local command's `cmd &`
   * outlives its sandbox dir; the cgroup goes at a later reap, once it has ended).
   */
  async remove(name: string): Promise<boolean> {
    const dir = new CgroupDir(join(this.host.unified, this.root, name));
    return removeTree(dir) || ((await dir.emptied(EMPTY_WAIT_MS)) && removeTree(dir));
  }

  /**
   * The backend closes: the sandbox cgroups go once empty, and the installation's own with them.
   * One whose processes are all berth's (in no command's group: a warden told to end a moment
   * ago) is waited for, bounded; one where a command left something running is not.
   */
  async close(): Promise<void> {
    const root = new CgroupDir(join(this.host.unified, this.root));
    const ending = root.children('').filter((d) => d.children(GROUP_PREFIX).every((g) => g.isEmpty()));
    await Promise.all(ending.map((d) => d.emptied(CLOSE_WAIT_MS)));
    this.reap();
    root.remove();
  }

  /** Removes every sandbox cgroup of this installation that no process is in now (after a crashed berth's). */
  reap(): string[] {
    const removed: string[] = [];
    for (const sandbox of new CgroupDir(join(this.host.unified, this.root)).children('')) {
      if (removeTree(sandbox)) removed.push(posix.basename(sandbox.path));
    }
    return removed;
  }
}
