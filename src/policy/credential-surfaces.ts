import path from 'node:path';

export interface CredentialSurfaceContext {
  homeDir: string;
  /** berth's own state dir (`BERTH_HOME`). */
  stateDir: string;
  /** Docker socket paths (`/var/run/docker.sock`, `~/.docker/run/docker.sock`, ...). */
  dockerSockets: readonly string[];
  /**
   * Optional real-path resolver. When given, every surface is also checked by its real path,
   * so a symlinked `~/.ssh` (or `/var/run` -> `/run`) is caught under either name.
   */
  realpath?: ((p: string) => string | undefined) | undefined;
}

/**
 * Directories under home that hold credentials. DESIGN names the first six; `.azure` and
 * `.password-store` are the same kind of thing (cloud login, `pass` store) and cost nothing
 * to refuse.
 */
export const HOME_CREDENTIAL_DIRS = ['.ssh', '.aws', '.gnupg', '.kube', '.docker', '.config', '.azure', '.password-store'];

interface Surface {
  path: string;
  label: string;
  /** Home: refused itself and as something contained, but a project inside it is fine. */
  insideAllowed: boolean;
}

/**
 * Why `realPath` must never be bound into a sandbox or used as its workspace, or undefined
 * when it is fine. Refused: `/`, the home directory itself, the state dir, the credential dirs
 * under home, docker sockets, anything inside one of those (except home: a project under home
 * is fine), and anything containing one of them (`/home`, `/var/run`).
 *
 * Comparison ignores case: on macOS and Windows `~/.SSH` is `~/.ssh`, and refusing a
 * differently-cased twin on Linux costs nothing.
 *
 * @example
 * credentialSurfaceReason('/home/ana', { homeDir: '/home/ana', stateDir: '/home/ana/.berth', dockerSockets: [] })
 * // 'is the home directory itself'
 */
export function credentialSurfaceReason(realPath: string, ctx: CredentialSurfaceContext): string | undefined {
  if (!path.isAbsolute(realPath)) return 'is not an absolute path';
  const target = path.resolve(realPath);
  if (target === path.parse(target).root) return 'is the filesystem root';
  const t = fold(target);
  for (const surface of surfaces(ctx)) {
    const s = fold(surface.path);
    if (t === s) return surface.insideAllowed ? `is ${surface.label} itself` : `is ${surface.label}`;
    if (isStrictlyInside(t, s) && !surface.insideAllowed) return `is inside ${surface.label} (${surface.path})`;
    if (isStrictlyInside(s, t)) return `contains ${surface.label} (${surface.path})`;
  }
  return undefined;
}

function surfaces(ctx: CredentialSurfaceContext): Surface[] {
  const list: Surface[] = [];
  const add = (p: string, label: string, insideAllowed = false): void => {
    if (p === '' || !path.isAbsolute(p)) return;
    const forms = new Set([path.resolve(p)]);
    const real = ctx.realpath?.(p);
    if (real !== undefined && path.isAbsolute(real)) forms.add(path.resolve(real));
    for (const form of forms) list.push({ path: form, label, insideAllowed });
  };
  add(ctx.homeDir, 'the home directory', true);
  add(ctx.stateDir, "berth's state dir");
  if (ctx.homeDir !== '' && path.isAbsolute(ctx.homeDir)) {
    for (const dir of HOME_CREDENTIAL_DIRS) add(path.join(ctx.homeDir, dir), `~/${dir}`);
  }
  for (const socket of ctx.dockerSockets) add(socket, 'a docker socket');
  return list;
}

function fold(p: string): string {
  return p.toLowerCase();
}

/** `child` is below `parent` (not equal). Both absolute, resolved, folded. */
function isStrictlyInside(child: string, parent: string): boolean {
  if (child === parent) return false;
  const prefix = parent.endsWith(path.sep) ? parent : parent + path.sep;
  return child.startsWith(prefix);
}
