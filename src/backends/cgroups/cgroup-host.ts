import { accessSync, constants, existsSync, readFileSync } from 'node:fs';
import { release } from 'node:os';
import { join } from 'node:path';
import { errnoOf } from './cgroup-dir.js';
import { parseCgroupMounts, parseNsPids, parseProcessCgroups, type ProcessCgroups } from './proc-files.js';

/** Where this host's cgroup hierarchies are, as berth's own mount namespace sees them. */
export interface CgroupHost {
  /** The cgroup2 hierarchy's mount point (`/sys/fs/cgroup`; `/sys/fs/cgroup/unified` on a hybrid host). */
  unified: string;
  /** v1 hierarchies by controller: a container's pids limit lives there on a hybrid host. */
  v1: ReadonlyMap<string, string>;
}

/** The host's cgroups, or why berth cannot group processes here. */
export type CgroupHostProbe = { ok: true; host: CgroupHost } | { ok: false; reason: string };

/** Reads /proc/self/mountinfo once: where the cgroup2 hierarchy is. */
export function probeCgroupHost(): CgroupHostProbe {
  let mountinfo: string;
  try {
    mountinfo = readFileSync('/proc/self/mountinfo', 'utf8');
  } catch {
    return { ok: false, reason: 'this host has no /proc/self/mountinfo (not Linux)' };
  }
  const mounts = parseCgroupMounts(mountinfo);
  if (mounts.unified === undefined) return { ok: false, reason: 'no cgroup2 hierarchy is mounted (a cgroup v1 only host)' };
  return { ok: true, host: { unified: mounts.unified, v1: mounts.v1 } };
}

/**
 * Why berth's processes cannot be grouped on this host, or undefined when they can: a cgroup2
 * hierarchy, berth's own cgroup writable to it, a kernel that freezes groups (Linux 5.2). Only
 * reads; what `explain` says before any sandbox runs (a backend still checks its sandbox's own
 * cgroup when it starts one, and falls back to tags if it must).
 */
export function hostGroupsUnusable(): string | undefined {
  const probe = probeCgroupHost();
  if (!probe.ok) return probe.reason;
  const own = cgroupsOf('self')?.unified;
  if (own === undefined) return 'berth\'s own process is in no cgroup2 group';
  const [major = 0, minor = 0] = release().split('.').map((n) => Number.parseInt(n, 10));
  if (major < 5 || (major === 5 && minor < 2)) return 'the kernel cannot freeze cgroups (cgroup.freeze needs Linux 5.2)';
  return notWritable(join(probe.host.unified, own));
}

/** The cgroups of host process `pid`, or undefined when it is gone or not readable. */
export function cgroupsOf(pid: number | 'self'): ProcessCgroups | undefined {
  try {
    return parseProcessCgroups(readFileSync(`/proc/${pid}/cgroup`, 'utf8'));
  } catch {
    return undefined;
  }
}

/**
 * Why berth cannot make and kill groups under `dir` (a cgroup2 directory other than the
 * hierarchy's root), or undefined when it can: it must be writable to berth (root, or a delegated
 * subtree), and the kernel must freeze groups (Linux 5.2; `cgroup.kill` of 5.14 is used when there).
 */
export function groupsUnusableUnder(dir: string): string | undefined {
  return notWritable(dir) ?? (existsSync(join(dir, 'cgroup.freeze')) ? undefined : 'the kernel cannot freeze cgroups (cgroup.freeze needs Linux 5.2)');
}

/** Why berth may not make groups in cgroup2 directory `dir` and move processes there, or undefined. */
export function notWritable(dir: string): string | undefined {
  if (!existsSync(join(dir, 'cgroup.procs'))) return `${dir} is not a cgroup2 directory`;
  try {
    accessSync(dir, constants.W_OK);
    accessSync(join(dir, 'cgroup.procs'), constants.W_OK);
    return undefined;
  } catch {
    return `berth may not write ${dir} (it is not root, or the hierarchy is read-only)`;
  }
}

/** How groups under `dir` are killed, for explain and logs. */
export function mechanismUnder(dir: string): string {
  return existsSync(join(dir, 'cgroup.kill')) ? 'cgroup2 (cgroup.kill)' : 'cgroup2 (freeze, then SIGKILL to each process)';
}

/**
 * Pids in use and the limit of the v1 or v2 pids cgroup of host process `pid` (a container's main
 * process), as files to read later; undefined where it has no pids limit berth can read.
 */
export function pidsFilesOf(host: CgroupHost, cgroups: ProcessCgroups): { current: string; max: string } | undefined {
  const v1Mount = host.v1.get('pids');
  const v1Path = cgroups.v1.get('pids');
  const dir = v1Mount !== undefined && v1Path !== undefined ? join(v1Mount, v1Path)
    : cgroups.unified !== undefined ? join(host.unified, cgroups.unified) : undefined;
  if (dir === undefined || !existsSync(join(dir, 'pids.max'))) return undefined;
  return { current: join(dir, 'pids.current'), max: join(dir, 'pids.max') };
}

/** Reads a pids limit's files; undefined when unlimited or unreadable. */
export function readPids(files: { current: string; max: string }): { current: number; max: number } | undefined {
  try {
    const max = readFileSync(files.max, 'latin1').trim();
    if (max === 'max') return undefined;
    return { current: Number(readFileSync(files.current, 'latin1').trim()), max: Number(max) };
  } catch {
    return undefined;
  }
}

/** Host process `hostPid`'s pids: on this host, and in the innermost pid namespace it lives in; undefined when it is gone. */
export function pidsOnThisHost(hostPid: number | undefined): { host: number; sandbox: number } | undefined {
  if (hostPid === undefined) return undefined;
  try {
    const ns = parseNsPids(readFileSync(`/proc/${hostPid}/status`, 'latin1'));
    const sandbox = ns[ns.length - 1];
    return sandbox === undefined ? undefined : { host: hostPid, sandbox };
  } catch {
    return undefined;
  }
}

/** The `NSpid` column of the pid namespace host process `pid` lives in (0 for berth's own), or undefined when it is gone. */
export function pidLevelOf(pid: number | 'self'): number | undefined {
  try {
    const n = parseNsPids(readFileSync(`/proc/${pid}/status`, 'latin1')).length;
    return n > 0 ? n - 1 : undefined;
  } catch (err) {
    if (errnoOf(err) === 'ENOENT') return undefined;
    throw err;
  }
}
