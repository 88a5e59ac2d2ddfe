import { lstatSync, readlinkSync, realpathSync } from 'node:fs';
import path from 'node:path';

/**
 * A host system path as the sandbox shows it: a host file or dir bound read-only at `path` (from
 * `source`, the same path unless a link outside what the sandbox sees had to be resolved), or the
 * same symlink.
 */
export type SystemPath = { path: string; kind: 'bind'; source: string } | { path: string; kind: 'symlink'; target: string };

/*
 * Only what programs need to run: the OS's binaries and libraries, and a minimal /etc. Not /home,
 * /root, /var, /run (sockets such as docker.sock live there), /srv, /opt or /mnt: whatever the host
 * keeps there is not the sandbox's.
 */
const CANDIDATES = ['/usr', '/bin', '/sbin', '/lib', '/lib32', '/lib64', '/libx32'] as const;

/*
 * /etc is not the host's: a world-readable token or config there is none of the sandbox's
 * business. The sandbox gets generated passwd, group, hosts and nsswitch.conf (layout.ts), and of
 * the host's /etc only what programs read to run: the dynamic loader's cache and config, CA
 * certificates (and OpenSSL's config), the alternatives links binaries in /usr resolve through,
 * time zone, OS release, the protocol and service tables and MIME types, and resolv.conf when the
 * sandbox has the host's network (see `etcForNetwork`).
 */
const ETC_SHOWN = [
  'ld.so.cache', 'ld.so.conf', 'ld.so.conf.d',
  'ssl/certs', 'ssl/openssl.cnf', 'ca-certificates', 'ca-certificates.conf', 'pki',
  'alternatives',
  'localtime', 'timezone',
  'os-release', 'debian_version',
  'protocols', 'services', 'mime.types',
  'host.conf', 'gai.conf',
  'mtab',
  'resolv.conf',
] as const;

/** Shown only to a sandbox on the host's network: without one it resolves nothing anyway. */
const NETWORK_ONLY = '/etc/resolv.conf';

/**
 * The system paths of this host to show in every sandbox, as they are here (merged-/usr hosts have
 * /bin -> usr/bin symlinks, older ones real dirs), then the minimal /etc. Missing ones are left out.
 */
export function hostSystemPaths(): SystemPath[] {
  return [...CANDIDATES, ...ETC_SHOWN.map((e) => `/etc/${e}`)].flatMap((p) => shown(p));
}

/** `paths` for a sandbox on `network`: resolv.conf only with the host's network. */
export function etcForNetwork(paths: readonly SystemPath[], network: 'none' | 'host'): SystemPath[] {
  return paths.filter((p) => network === 'host' || p.path !== NETWORK_ONLY);
}

/**
 * One host path as the sandbox shows it. A symlink stays a symlink when what it leads to is in the
 * sandbox's view (/usr, its own /proc); one that leads elsewhere (resolv.conf into /run, say) is
 * resolved here and its file bound in its place.
 */
function shown(p: string): SystemPath[] {
  let st;
  try {
    st = lstatSync(p);
  } catch {
    return [];
  }
  if (st.isDirectory() || st.isFile()) return [{ path: p, kind: 'bind', source: p }];
  if (!st.isSymbolicLink()) return [];
  const target = readlinkSync(p);
  const resolved = path.resolve(path.dirname(p), target);
  if (!p.startsWith('/etc/') || resolved.startsWith('/usr/') || resolved.startsWith('/proc/')) return [{ path: p, kind: 'symlink', target }];
  try {
    return [{ path: p, kind: 'bind', source: realpathSync(p) }];
  } catch {
    return []; // a dangling link: nothing to show
  }
}
