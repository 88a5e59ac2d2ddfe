import { join } from 'node:path';
import type Dockerode from 'dockerode';
import type { Logger } from '../../logging/logger.js';
import { cgroupsOf, groupsUnusableUnder, pidLevelOf, pidsFilesOf, type CgroupHostProbe } from '../cgroups/cgroup-host.js';
import { SandboxCgroups } from '../cgroups/sandbox-cgroups.js';

/**
 * The kernel's grouping for a running container, when berth can manage its cgroups from here: the
 * engine runs on this host (the container's main process is visible here and its cgroup2 path
 * names the container) and berth may write that cgroup. Berth's groups nest in the container's own
 * cgroup, so its memory and pids limits apply to them; inside the container the cgroup hierarchy is
 * read-only (and its user holds no capability to remount it), so nothing there leaves a group.
 * Otherwise (a remote engine, an engine in a VM, berth without the rights) why not.
 */
export function containerGroups(probe: CgroupHostProbe, info: Dockerode.ContainerInspectInfo, log: Logger): SandboxCgroups | { unavailable: string } {
  if (!probe.ok) return { unavailable: probe.reason };
  const host = probe.host;
  const pid = info.State.Pid;
  if (!info.State.Running || !(pid > 0)) return { unavailable: 'the container is not running' };
  const cgroups = cgroupsOf(pid);
  if (cgroups?.unified === undefined || !cgroups.unified.includes(info.Id)) {
    return { unavailable: 'the engine\'s containers are not processes of this host (a remote engine, or one in a VM)' };
  }
  const why = groupsUnusableUnder(join(host.unified, cgroups.unified));
  if (why !== undefined) return { unavailable: why };
  const level = pidLevelOf(pid);
  if (level === undefined) return { unavailable: 'the container\'s main process ended' };
  if (level < 1) return { unavailable: 'the container shares berth\'s pid namespace' };
  return new SandboxCgroups({ host, base: cgroups.unified, pidLevel: level, pids: pidsFilesOf(host, cgroups), log });
}
