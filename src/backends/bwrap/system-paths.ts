import { lstatSync, readlinkSync } from 'node:fs';

/** A host system path as the sandbox shows it: bound read-only, or the same symlink. */
export type SystemPath = { path: string; kind: 'dir' } | { path: string; kind: 'symlink'; target: string };

/*
 * Only what programs need to run: the OS's binaries and libraries and /etc. Not /home, /root,
 * /var, /run (sockets such as docker.sock live there), /srv, /opt or /mnt: whatever the host keeps
 * there is not the sandbox's. /etc is readable as it is to any unprivileged host user (the
 * sandbox's uid is one): /etc/shadow and host keys stay unreadable by their modes, and
 * /etc/passwd and /etc/group are replaced by generated ones.
 */
const CANDIDATES = ['/usr', '/etc', '/bin', '/sbin', '/lib', '/lib32', '/lib64', '/libx32'] as const;

/**
 * The system paths of this host to show in every sandbox, as they are here (merged-/usr hosts have
 * /bin -> usr/bin symlinks, older ones real dirs). Missing candidates are left out.
 */
export function hostSystemPaths(): SystemPath[] {
  const out: SystemPath[] = [];
  for (const path of CANDIDATES) {
    let st;
    try {
      st = lstatSync(path);
    } catch {
      continue;
    }
    if (st.isSymbolicLink()) out.push({ path, kind: 'symlink', target: readlinkSync(path) });
    else if (st.isDirectory()) out.push({ path, kind: 'dir' });
  }
  return out;
}
