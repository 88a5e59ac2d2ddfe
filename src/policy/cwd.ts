import path from 'node:path';
import { CONTAINER_WORKSPACE } from './mount.js';

export interface StartCwdInput {
  /** The shell identity's recorded cwd and the backend that recorded it, if any. */
  recorded: { path: string; backend: string } | undefined;
  backendName: string;
  /** The backend mounts host dirs at `/workspace` (its `mountsHostDirs` trait). */
  containerBackend: boolean;
  /** Host dir bound at `/workspace`, or null. */
  mount: string | null;
  /**
   * Where to start when nothing recorded applies (the sandbox default, or the workspace on local);
   * undefined asks only whether a record applies.
   */
  defaultCwd: string | undefined;
}

/**
 * The starting cwd of a new shell: the recorded cwd when it is meaningful in this sandbox,
 * else `defaultCwd`. (An explicit `workdir` is per command and handled by the shell.)
 *
 * On container backends, a host path under the mounted dir maps to `/workspace/...`; any
 * other path recorded elsewhere is discarded, so a container never starts in `/Users/...`.
 * Paths recorded by the same container backend are in-sandbox paths and kept. On other
 * backends only a path recorded by the same backend is kept (an ssh host's paths mean nothing
 * locally, and a container's `/workspace` means nothing on the host).
 *
 * @example
 * resolveStartCwd({ recorded: { path: '/home/ana/app/src', backend: 'local' }, backendName: 'docker',
 *   containerBackend: true, mount: '/home/ana/app', defaultCwd: '/workspace' }) // '/workspace/src'
 */
export function resolveStartCwd<D extends string | undefined>(a: StartCwdInput & { defaultCwd: D }): string | D {
  const recorded = a.recorded;
  if (recorded === undefined || !path.posix.isAbsolute(recorded.path)) return a.defaultCwd;
  const sameBackend = recorded.backend === a.backendName;
  if (!a.containerBackend) return sameBackend ? recorded.path : a.defaultCwd;
  const mapped = a.mount === null ? undefined : mapUnder(recorded.path, a.mount);
  if (mapped !== undefined) return mapped;
  return sameBackend ? recorded.path : a.defaultCwd;
}

/**
 * A command's explicit `workdir`: on a container backend, a host path under the mounted dir
 * becomes the same place under `/workspace`; anything else is passed on as given.
 *
 * @example
 * mapWorkdir('/home/ana/app/src', { containerBackend: true, mount: '/home/ana/app' }) // '/workspace/src'
 */
export function mapWorkdir(workdir: string, a: { containerBackend: boolean; mount: string | null }): string {
  if (!a.containerBackend || a.mount === null || !path.posix.isAbsolute(workdir)) return workdir;
  return mapUnder(workdir, a.mount) ?? workdir;
}

/** `/workspace/<rest>` when `p` is `mount` or below it, else undefined. */
function mapUnder(p: string, mount: string): string | undefined {
  const resolved = path.posix.resolve(p);
  const root = path.posix.resolve(mount);
  if (resolved === root) return CONTAINER_WORKSPACE;
  const prefix = root.endsWith('/') ? root : root + '/';
  if (!resolved.startsWith(prefix)) return undefined;
  return `${CONTAINER_WORKSPACE}/${resolved.slice(prefix.length)}`;
}
