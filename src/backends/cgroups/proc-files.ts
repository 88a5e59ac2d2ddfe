/*
 * Pure readers of the kernel's text files about cgroups and processes (no I/O here): where the
 * hierarchies are mounted (/proc/self/mountinfo), which cgroups a process is in (/proc/PID/cgroup),
 * and a process's pids in its nested pid namespaces (the `NSpid:` line of /proc/PID/status).
 */

/** Mount points of the cgroup hierarchies: the cgroup2 one, and the v1 ones by controller. */
export interface CgroupMounts {
  /** The cgroup2 (unified) hierarchy: `/sys/fs/cgroup`, or `/sys/fs/cgroup/unified` on a hybrid host. */
  unified: string | undefined;
  /** v1 hierarchies by controller (`pids` → `/sys/fs/cgroup/pids`). */
  v1: ReadonlyMap<string, string>;
}

/** Undoes mountinfo's octal escapes (`\040` is a space). */
function unescapeMountPath(p: string): string {
  return p.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8)));
}

/**
 * The cgroup mounts of /proc/self/mountinfo: `ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [TAGS] - TYPE
 * SOURCE SUPEROPTS`. Only mounts of a hierarchy's root (`ROOT` is `/`) count: a bind of a subtree
 * (what a container sees) does not show the paths /proc/PID/cgroup names. The first of each wins.
 */
export function parseCgroupMounts(mountinfo: string): CgroupMounts {
  let unified: string | undefined;
  const v1 = new Map<string, string>();
  for (const line of mountinfo.split('\n')) {
    const dash = line.indexOf(' - ');
    if (dash < 0) continue;
    const head = line.slice(0, dash).split(' ');
    const [type, , superOpts = ''] = line.slice(dash + 3).split(' ');
    const root = head[3];
    const mountPoint = head[4];
    if (root !== '/' || mountPoint === undefined) continue;
    const at = unescapeMountPath(mountPoint);
    if (type === 'cgroup2') {
      unified ??= at;
    } else if (type === 'cgroup') {
      for (const opt of superOpts.split(',')) if (opt !== 'rw' && opt !== 'ro' && !v1.has(opt)) v1.set(opt, at);
    }
  }
  return { unified, v1 };
}

/** The cgroups of one process: its cgroup2 path, and its v1 paths by controller. */
export interface ProcessCgroups {
  /** Its path in the cgroup2 hierarchy (the `0::` line), absolute from the hierarchy's root. */
  unified: string | undefined;
  v1: ReadonlyMap<string, string>;
}

/** Parses /proc/PID/cgroup: `0::/docker/ID` (cgroup2) and `8:pids:/docker/ID` (v1) lines. */
export function parseProcessCgroups(text: string): ProcessCgroups {
  let unified: string | undefined;
  const v1 = new Map<string, string>();
  for (const line of text.split('\n')) {
    const first = line.indexOf(':');
    const second = line.indexOf(':', first + 1);
    if (first < 0 || second < 0) continue;
    const id = line.slice(0, first);
    const controllers = line.slice(first + 1, second);
    const path = line.slice(second + 1);
    if (id === '0' && controllers === '') unified = path;
    else for (const c of controllers.split(',')) if (c !== '') v1.set(c, path);
  }
  return { unified, v1 };
}

/** The `NSpid:` pids of /proc/PID/status, outermost (the reader's namespace) first; empty when absent. */
export function parseNsPids(status: string): number[] {
  const m = /^NSpid:\s*(.*)$/m.exec(status);
  if (m === null) return [];
  return (m[1] ?? '').trim().split(/\s+/).map(Number).filter((n) => Number.isInteger(n) && n > 0);
}
