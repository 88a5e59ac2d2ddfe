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
 * Directories under home that hold credentials. docs/design.md §4 names the first six; `.azure` and
 * `.password-store` are the same kind of thing (cloud login, `pass` store) and cost nothing
 * to refuse.
 */
export const HOME_CREDENTIAL_DIRS = ['.ssh', '.aws', '.gnupg', '.kube', '.docker', '.config', '.azure', '.password-store'];

/*
 * Host directories that are never a sandbox's workspace or volume (docs/design.md §8: nothing an
 * agent does may reach the host). A bind is read-write by default, so binding any of these hands
 * the agent the host itself: write /etc/cron.d or /usr/bin, read /etc/shadow or /var/lib/docker,
 * reach containerd.sock under /run, the kernel through /proc, /sys and /dev.
 *
 * SYSTEM_DIRS: refused themselves, with everything inside, and anything containing them.
 * Linux's FHS system trees, plus the /var parts that hold service state, logs, spools (cron
 * jobs), caches and backups (shadow.bak); macOS's /System and /Library (/etc, /var and /tmp
 * there are links into /private, caught by their real paths).
 *
 * SHARED_PARENTS: refused themselves only. Each holds many users' or services' files (every
 * home, every mount, every temp file), but a project inside one is an ordinary workspace:
 * /home/ana/app, /srv/site, /opt/tool, /mnt/data/proj, /tmp/project (tests use temp dirs).
 */
const SYSTEM_DIRS = [
  '/bin', '/sbin', '/lib', '/lib32', '/lib64', '/libx32', '/usr', '/etc', '/boot', '/proc', '/sys', '/dev',
  '/run', '/var/run', '/var/lib', '/var/log', '/var/spool', '/var/cache', '/var/mail', '/var/backups', '/snap',
  '/System', '/Library',
];
const SHARED_PARENTS = ['/home', '/var', '/opt', '/srv', '/mnt', '/media', '/tmp', '/var/tmp', '/Users', '/Volumes', '/private'];

const NEVER_EXPOSED = 'berth never exposes to a sandbox';

interface Surface {
  path: string;
  label: string;
  /** What kind of thing it is, for the message (`a credential surface`, `a system directory`). */
  kind: string;
  /** Home and shared parents: refused themselves, but a project inside is fine. */
  insideAllowed: boolean;
  /** Shared parents: a path that contains one is not refused for it (`/` is refused on its own). */
  containsAllowed: boolean;
}

/**
 * Why `realPath` must never be bound into a sandbox or used as its workspace, or undefined
 * when it is fine. The reason names the path, the rule and the kind of surface; callers add
 * the fix. Refused:
 * - credential surfaces: `/`, the home directory itself, the state dir, the credential dirs
 *   under home, docker sockets, anything inside one of those (except home: a project under
 *   home is fine), and anything containing one of them;
 * - system directories (`SYSTEM_DIRS`: /etc, /usr, /var/lib, /run, /proc, ...), anything
 *   inside them and anything containing them;
 * - shared parents (`SHARED_PARENTS`: /home, /var, /opt, /srv, /mnt, /media, /tmp, ...)
 *   themselves, not the projects inside them.
 *
 * Comparison ignores case: on macOS and Windows `~/.SSH` is `~/.ssh`, and refusing a
 * differently-cased twin on Linux costs nothing.
 *
 * @example
 * credentialSurfaceReason('/home/ana', { homeDir: '/home/ana', stateDir: '/home/ana/.berth', dockerSockets: [] })
 * // 'is the home directory itself, a credential surface berth never exposes to a sandbox'
 * credentialSurfaceReason('/var/lib/docker', ctx)
 * // 'is inside /var/lib, a system directory berth never exposes to a sandbox'
 */
export function credentialSurfaceReason(realPath: string, ctx: CredentialSurfaceContext): string | undefined {
  return surfaceChecker(ctx)(realPath);
}

/**
 * `credentialSurfaceReason` for several paths against one context: the surfaces (and their real
 * paths) are listed once.
 */
export function surfaceChecker(ctx: CredentialSurfaceContext): (p: string) => string | undefined {
  const list = surfaces(ctx).map((surface) => ({ ...surface, folded: fold(surface.path) }));
  return (p) => {
    if (!path.isAbsolute(p)) return 'is not an absolute path';
    const target = path.resolve(p);
    if (target === path.parse(target).root) return `is the filesystem root, a credential surface ${NEVER_EXPOSED}`;
    const t = fold(target);
    for (const surface of list) {
      const s = surface.folded;
      if (t === s) return `${surface.insideAllowed ? `is ${surface.label} itself` : `is ${surface.label}`}, ${surface.kind}`;
      const where = surface.label === surface.path ? surface.label : `${surface.label} (${surface.path})`;
      if (isStrictlyInside(t, s) && !surface.insideAllowed) return `is inside ${where}, ${surface.kind}`;
      if (isStrictlyInside(s, t) && !surface.containsAllowed) return `contains ${where}, ${surface.kind}`;
    }
    return undefined;
  };
}

function surfaces(ctx: CredentialSurfaceContext): Surface[] {
  const list: Surface[] = [];
  const add = (p: string, label: string, kind: string, inside: 'refused' | 'allowed' | 'parent'): void => {
    if (p === '' || !path.isAbsolute(p)) return;
    const forms = new Set([path.resolve(p)]);
    const real = ctx.realpath?.(p);
    if (real !== undefined && path.isAbsolute(real)) forms.add(path.resolve(real));
    for (const form of forms) list.push({ path: form, label, kind, insideAllowed: inside !== 'refused', containsAllowed: inside === 'parent' });
  };
  const credential = `a credential surface ${NEVER_EXPOSED}`;
  add(ctx.homeDir, 'the home directory', credential, 'allowed');
  add(ctx.stateDir, "berth's state dir", credential, 'refused');
  if (ctx.homeDir !== '' && path.isAbsolute(ctx.homeDir)) {
    for (const dir of HOME_CREDENTIAL_DIRS) add(path.join(ctx.homeDir, dir), `~/${dir}`, credential, 'refused');
  }
  for (const socket of ctx.dockerSockets) add(socket, 'a docker socket', credential, 'refused');
  for (const dir of SYSTEM_DIRS) add(dir, dir, `a system directory ${NEVER_EXPOSED}`, 'refused');
  for (const dir of SHARED_PARENTS) add(dir, dir, "a directory that holds other users' or services' files (a project inside it is fine)", 'parent');
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
