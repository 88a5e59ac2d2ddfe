import { existsSync, realpathSync, statSync } from 'node:fs';
import path from 'node:path';
import { PolicyRefusedError, UsageError } from '../errors.js';
import type { AttachedWorkspace } from '../scope/call-scope.js';
import { outsideAllowedRootsReason } from './allowed-roots.js';
import { surfaceChecker } from './credential-surfaces.js';

/** The only file-system questions the mount policy asks. */
export interface MountFs {
  /** Real path (symlinks resolved), or undefined when the path does not exist. */
  realpath(p: string): string | undefined;
  isDirectory(p: string): boolean;
}

/** `MountFs` over the host file system. */
export const hostMountFs: MountFs = {
  realpath(p) {
    // Most surfaces asked about do not exist on a given host: existsSync answers that without
    // the cost of a thrown error (the mount check asks about ~40 paths per call).
    if (!existsSync(p)) return undefined;
    try {
      return realpathSync.native(p);
    } catch {
      return undefined;
    }
  },
  isDirectory(p) {
    try {
      return statSync(p).isDirectory();
    } catch {
      return false;
    }
  },
};

export interface MountInput {
  key: string;
  /** The key names a shared sandbox (`default`, `profile:*`, `shared:*`). */
  shared: boolean;
  workspace: AttachedWorkspace | undefined;
  /** `workspace.mount` of the call's profile. */
  mountEnabled: boolean;
  /** The call's backend mounts host dirs (its `mountsHostDirs` trait); otherwise its paths are host paths (local). */
  containerBackend: boolean;
  homeDir: string;
  stateDir: string;
  dockerSockets: string[];
  /** `workspace.allowedRoots` of the call's profile: when non-empty, a workspace must lie under one. */
  allowedRoots: readonly string[];
  fs: MountFs;
}

export interface MountDecision {
  /** Real host path bound at `/workspace`, or null. Always null on non-container backends. */
  mount: string | null;
  /** Why, in words, for `explain`. */
  mountReason: string;
  /** Non-container backends: the real path a new shell starts in, when a workspace applies. */
  startDir: string | undefined;
}

const ATTACHED = 'attached workspace';
const PROCESS_CWD = 'process working directory';

/** Where the mount appears inside a container. */
export const CONTAINER_WORKSPACE = '/workspace';

/**
 * Decide the workspace mount of a call (docs/design.md §4). Pure apart from `a.fs`.
 *
 * - A workspace the call attached (`source: 'session'`) wins in every mode, shared keys
 *   included. On a container backend with `workspace.mount` off nothing is mounted, the reason
 *   says so and the call goes on (docs/design.md §4: a gateway that always attaches the user's
 *   folder keeps working on an installation that does not mount). Nothing of it reaches the
 *   sandbox, so it is not checked either.
 * - A process-derived cwd (`source: 'process'`) is used only for the `default` key.
 * - Non-container backends never mount; the workspace becomes the starting directory.
 *
 * @example
 * resolveMount({ key: 'session:s1', shared: false, workspace: { path: '/home/ana/app', source: 'session' },
 *   mountEnabled: true, containerBackend: true, homeDir: '/home/ana', stateDir: '/home/ana/.berth',
 *   dockerSockets: ['/var/run/docker.sock'], allowedRoots: [], fs: hostMountFs })
 * // { mount: '/home/ana/app', mountReason: 'the workspace attached to the call', startDir: undefined }
 * @throws PolicyRefusedError naming the path and the rule; UsageError for a relative path.
 */
export function resolveMount(a: MountInput): MountDecision {
  const ws = a.workspace;
  if (ws === undefined) {
    return { mount: null, mountReason: 'no workspace attached', startDir: undefined };
  }
  const attached = ws.source !== 'process';
  const where = a.containerBackend ? 'mounted' : 'used as the starting directory';

  if (!attached && a.key !== 'default') {
    return {
      mount: null,
      mountReason:
        `the process working directory is a launch artifact; it is ${where} only for the default key, ` +
        `not for "${a.key}" (attach a workspace to the call to use one)`,
      startDir: undefined,
    };
  }

  if (a.containerBackend && !a.mountEnabled) {
    const mountReason = attached
      ? `workspace.mount is off: the attached workspace ${quoted(ws.path)} is not mounted (set workspace.mount: true to mount it)`
      : 'workspace.mount is off';
    return { mount: null, mountReason, startDir: undefined };
  }

  const what = attached ? ATTACHED : PROCESS_CWD;
  const origin = attached ? 'the workspace attached to the call' : 'the process working directory (default key)';
  if (a.containerBackend) {
    const mount = checkWorkspace(ws.path, what, a);
    const note = a.shared ? `; "${a.key}" is a shared sandbox, so every call that uses it sees this mount` : '';
    return { mount, mountReason: origin + note, startDir: undefined };
  }
  const nonContainer = 'non-container backends never mount';
  if (!attached) {
    // On the host nothing is mounted and nothing was asked: a launch dir that fails a rule
    // (berth started from ~) is simply not used, rather than failing every local command.
    try {
      const startDir = checkWorkspace(ws.path, what, a);
      return { mount: null, mountReason: `${nonContainer}; ${origin} is the starting directory`, startDir };
    } catch (err) {
      if (!(err instanceof PolicyRefusedError || err instanceof UsageError)) throw err;
      return { mount: null, mountReason: `${nonContainer}; not starting in it: ${err.message}`, startDir: undefined };
    }
  }
  return {
    mount: null,
    mountReason: `${nonContainer}; ${origin} is the starting directory`,
    startDir: checkWorkspace(ws.path, what, a),
  };
}

/**
 * The refusals shared by every workspace use: relative, in-container, missing, not a directory,
 * credential surface or system directory, outside `workspace.allowedRoots`. Returns the real path.
 */
function checkWorkspace(
  given: string,
  what: string,
  a: Pick<MountInput, 'homeDir' | 'stateDir' | 'dockerSockets' | 'allowedRoots' | 'fs'>,
): string {
  if (!path.isAbsolute(given)) {
    throw new UsageError(`${what} "${given}" is a relative path; pass an absolute path`);
  }
  const inContainer = inContainerPathReason(given, a.homeDir);
  if (inContainer !== undefined) throw refusal(what, quoted(given), inContainer);
  const real = a.fs.realpath(given);
  if (real === undefined) {
    throw refusal(what, quoted(given), 'does not exist; attach an existing directory');
  }
  const shown = real === path.resolve(given) ? quoted(real) : `${quoted(given)} (real path ${quoted(real)})`;
  if (!a.fs.isDirectory(real)) {
    throw refusal(what, shown, 'is not a directory; attach a directory');
  }
  const realInContainer = inContainerPathReason(real, a.homeDir);
  if (realInContainer !== undefined) throw refusal(what, shown, realInContainer);
  const check = surfaceChecker({ homeDir: a.homeDir, stateDir: a.stateDir, dockerSockets: a.dockerSockets, realpath: a.fs.realpath });
  const surface = check(real) ?? check(path.resolve(given));
  const fix = what === PROCESS_CWD ? 'start berth from a project folder or attach one' : 'attach a project folder';
  if (surface !== undefined) throw refusal(what, shown, `${surface}; ${fix} instead`);
  const outside = outsideAllowedRootsReason(real, a.allowedRoots, a.fs);
  if (outside !== undefined) throw refusal(what, shown, `${outside}; ${fix} under one of them, or add its root to workspace.allowedRoots`);
  return real;
}

/**
 * Paths that only make sense inside a sandbox, most likely an agent reporting its own cwd:
 * `/workspace` and below (but not `/workspaces`, the devcontainer convention on hosts), and
 * `/root` and below. When berth itself runs as root (`homeDir` is `/root`), `/root/...` is a
 * real host path and is judged by the other rules instead.
 */
export function inContainerPathReason(p: string, homeDir: string): string | undefined {
  const resolved = path.posix.resolve(p);
  if (under(resolved, CONTAINER_WORKSPACE)) {
    return `is an in-sandbox path (${CONTAINER_WORKSPACE}...), not a host directory; attach the host folder instead`;
  }
  if (under(resolved, '/root') && path.posix.resolve(homeDir || '/') !== '/root') {
    return 'is an in-sandbox path (/root...), not a host directory; attach the host folder instead';
  }
  return undefined;
}

export interface MountCompatibilityInput {
  key: string;
  shared: boolean;
  /** The mount the existing sandbox was created with. */
  existing: string | null;
  /** The mount this call resolved to. */
  requested: string | null;
}

/**
 * A mount is fixed when a container is created. A call that asks for a different one is an
 * error (docs/design.md §4: shared sandboxes; the same holds for any key, since the container cannot
 * change). A call that asks for none uses the sandbox as it is.
 */
export function assertMountCompatible(a: MountCompatibilityInput): void {
  if (a.requested === null || a.requested === a.existing) return;
  const has = a.existing === null ? 'no workspace mount' : `"${a.existing}" mounted at ${CONTAINER_WORKSPACE}`;
  const kind = a.shared ? 'shared sandbox' : 'sandbox';
  throw new PolicyRefusedError(
    `${kind} "${a.key}" already has ${has}; it cannot also mount "${a.requested}" (a mount is fixed ` +
      `when the container is created). Use that workspace, or a scope that gives this call its own sandbox`,
  );
}

function under(p: string, dir: string): boolean {
  return p === dir || p.startsWith(dir + '/');
}

function quoted(p: string): string {
  return JSON.stringify(p);
}

function refusal(what: string, shown: string, reason: string): PolicyRefusedError {
  return new PolicyRefusedError(`${what} ${shown} ${reason}`);
}
