import {
  SANDBOX_GID,
  SANDBOX_HOME,
  SANDBOX_RUN,
  SANDBOX_TMP,
  SANDBOX_UID,
  SANDBOX_WORKSPACE,
} from './layout.js';
import type { SystemPath } from './system-paths.js';

/** File descriptors bwrap reads at start-up, as numbered in its own process. */
export interface BwrapFds {
  /** Generated /etc/passwd, /etc/group, /etc/hosts and /etc/nsswitch.conf contents. */
  passwd: number;
  group: number;
  hosts: number;
  nsswitch: number;
  /** bwrap writes `{"child-pid": N, ...}` here: the host pid of the sandbox's pid 1. */
  info: number;
  /** The seccomp BPF program; undefined only when the operator opted out. */
  seccomp: number | undefined;
}

export interface BwrapPlan {
  /**
   * Host dirs to bind. bwrap resolves them by name as the sandbox's uid (even `--bind-fd` does),
   * so every ancestor must be traversable by it: see sandbox-dirs.ts.
   */
  binds: { workspace: string; home: string; run: string };
  systemPaths: readonly SystemPath[];
  /** `host` shares the host's network namespace; `none` gives the sandbox only its own loopback. */
  network: 'none' | 'host';
  hostname: string;
  /** Size of each of the /tmp and /dev/shm tmpfs (they are memory). */
  tmpSizeBytes: number;
  fds: BwrapFds;
  /** The program bwrap runs as the sandbox's first process, with its arguments. */
  command: readonly string[];
}

/**
 * bwrap's argv for one sandbox. Pure. Carries paths and fd numbers only: bwrap's argv is readable
 * inside the sandbox (/proc/1/cmdline), so no value that may be secret ever goes here (no
 * --setenv); environments travel over a pipe (see init-script.ts).
 *
 * Why each flag:
 * - `--unshare-all --unshare-user`: own user, mount, pid, ipc, uts, net and cgroup namespaces;
 *   `--share-net` only when the network is asked for.
 * - `--disable-userns`: no user namespace can be made inside (bwrap sets
 *   user.max_user_namespaces in an outer namespace the sandbox cannot reach); the seccomp filter
 *   refuses CLONE_NEWUSER too.
 * - `--cap-drop ALL`: no capabilities, not even in the sandbox's own user namespace.
 * - `--die-with-parent`: the sandbox never outlives the berth process that holds it.
 * - `--new-session`: no controlling terminal to push keystrokes into (TIOCSTI).
 * - `--uid/--gid`: the sandbox sees itself as 1000; on the host it is the unprivileged uid berth
 *   started bwrap as.
 * - /etc is built, not bound: generated account, host and name-service files plus the few host
 *   files programs need (system-paths.ts).
 * - Writable places are /workspace and home (host dirs), and /tmp and /dev/shm, tmpfs of
 *   `tmpSizeBytes` each (memory); everything else is read-only.
 */
export function bwrapArgs(plan: BwrapPlan): string[] {
  const args = ['--unshare-all'];
  if (plan.network === 'host') args.push('--share-net');
  args.push(
    '--unshare-user',
    '--disable-userns',
    '--die-with-parent',
    '--new-session',
    '--cap-drop', 'ALL',
    '--uid', String(SANDBOX_UID),
    '--gid', String(SANDBOX_GID),
    '--hostname', plan.hostname,
    '--info-fd', String(plan.fds.info),
  );
  if (plan.fds.seccomp !== undefined) args.push('--seccomp', String(plan.fds.seccomp));
  for (const p of plan.systemPaths) {
    if (p.kind === 'bind') args.push('--ro-bind', p.source, p.path);
    else args.push('--symlink', p.target, p.path);
  }
  args.push(
    '--ro-bind-data', String(plan.fds.passwd), '/etc/passwd',
    '--ro-bind-data', String(plan.fds.group), '/etc/group',
    '--ro-bind-data', String(plan.fds.hosts), '/etc/hosts',
    '--ro-bind-data', String(plan.fds.nsswitch), '/etc/nsswitch.conf',
    '--dev', '/dev',
    '--size', String(plan.tmpSizeBytes),
    '--perms', '1777',
    '--tmpfs', '/dev/shm',
    '--proc', '/proc',
    '--size', String(plan.tmpSizeBytes),
    '--perms', '1777',
    '--tmpfs', SANDBOX_TMP,
    '--symlink', '../tmp', '/var/tmp',
    '--bind', plan.binds.workspace, SANDBOX_WORKSPACE,
    '--bind', plan.binds.home, SANDBOX_HOME,
    '--ro-bind', plan.binds.run, SANDBOX_RUN,
    // bwrap's own tmpfs for / and /dev hold no size limit (half the host's memory): read-only once built.
    '--remount-ro', '/dev',
    '--remount-ro', '/',
    '--chdir', SANDBOX_WORKSPACE,
    '--',
    ...plan.command,
  );
  return args;
}
