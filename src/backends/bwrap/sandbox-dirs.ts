import { chmodSync, chownSync, lstatSync, mkdirSync, rmSync, type Stats } from 'node:fs';
import { dirname, join, resolve, sep } from 'node:path';
import { BackendUnavailableError, BerthError } from '../../errors.js';
import type { SandboxDirs } from './layout.js';

/*
 * Host dirs of bwrap sandboxes:
 *
 *   <root>/                           berth's: 0711, owned by berth's user
 *   <root>/uids/                      berth's: 0700 (uid claims, see uid-claims.ts)
 *   <root>/sandboxes/                 berth's: 0711
 *   <root>/sandboxes/<name>/          berth's: 0711
 *   <root>/sandboxes/<name>/workspace the sandbox uid's: 0700
 *   <root>/sandboxes/<name>/home      the sandbox uid's: 0700
 *   <root>/sandboxes/<name>/run       the sandbox uid's: 0700 (FIFOs, read-only inside)
 *
 * bwrap runs as the sandbox's uid and resolves bind sources by name as that uid (even with
 * --bind-fd), so the chain down to a sandbox's dirs must be traversable by it: root and ancestors
 * 0711 (search, no listing). What protects the files is the last step: each sandbox's dirs are 0700
 * and belong to its own uid, so neither another sandbox's uid nor any other host user gets in. The
 * root therefore lives outside $BERTH_HOME, which stays 0700 (its state is nobody else's).
 * Only berth (or root) may write the root and its ancestors, or one could swap a dir for a link.
 */

/** Where a root keeps its sandboxes and uid claims. Pure. */
export function rootLayout(root: string): { sandboxes: string; uids: string } {
  const abs = resolve(root);
  return { sandboxes: join(abs, 'sandboxes'), uids: join(abs, 'uids') };
}

/** The dirs of sandbox `name` (a dir name from scope/naming.ts) under `root`. Pure. */
export function sandboxDirs(root: string, name: string): SandboxDirs {
  if (!/^[A-Za-z0-9._-]{1,120}$/.test(name) || name === '.' || name === '..') {
    throw new BerthError('internal', `sandbox dir name ${JSON.stringify(name)} is not a plain name (letters, digits, . _ -)`);
  }
  const dir = join(rootLayout(root).sandboxes, name);
  return { root: dir, workspace: join(dir, 'workspace'), home: join(dir, 'home'), run: join(dir, 'run') };
}

/**
 * Makes `root` (0711) if missing and checks it and its ancestors: real dirs, owned by berth's user
 * or root, writable by no one else (a sticky dir such as /tmp is fine). Throws a
 * BackendUnavailableError naming the dir and the fix.
 */
export function prepareRoot(root: string): void {
  const abs = resolve(root);
  const layout = rootLayout(abs);
  mkdirSync(abs, { recursive: true, mode: 0o711 });
  chmodSync(abs, 0o711);
  mkdirSync(layout.sandboxes, { recursive: true, mode: 0o711 });
  chmodSync(layout.sandboxes, 0o711);
  mkdirSync(layout.uids, { recursive: true, mode: 0o700 });
  chmodSync(layout.uids, 0o700);
  const me = process.getuid?.() ?? 0;
  for (let dir = layout.sandboxes; ; dir = dirname(dir)) {
    const st = lstatSync(dir);
    const problem = unsafeAncestor(st, me);
    if (problem !== undefined) {
      throw new BackendUnavailableError(
        `the bwrap sandbox root ${abs} cannot be used: ${dir} ${problem}; choose a root whose every ancestor is a real dir ` +
          'owned by root or berth\'s user and writable by no one else, and traversable by others (mode 0711 or 0755)',
      );
    }
    if (dir === dirname(dir)) break;
  }
}

function unsafeAncestor(st: Stats, me: number): string | undefined {
  if (st.isSymbolicLink()) return 'is a symlink';
  if (!st.isDirectory()) return 'is not a directory';
  if (st.uid !== 0 && st.uid !== me) return `belongs to uid ${st.uid}`;
  const sticky = (st.mode & 0o1000) !== 0;
  if ((st.mode & 0o022) !== 0 && !(sticky && st.uid === 0)) return 'is writable by others';
  if ((st.mode & 0o001) === 0) return 'is not traversable by others (sandbox uids must pass through it)';
  return undefined;
}

/**
 * Creates a sandbox's dirs (idempotent). `owner` undefined: berth's own uid (berth is not root).
 * An existing dir of the sandbox must be a real dir owned by `owner`: a sandbox's uid is fixed
 * when it is first made, and reusing its files under another uid is refused, not repaired.
 */
export function createSandboxDirs(dirs: SandboxDirs, owner: { uid: number; gid: number } | undefined): void {
  mkdirSync(dirs.root, { mode: 0o711, recursive: true });
  chmodSync(dirs.root, 0o711);
  const uid = owner?.uid ?? process.getuid?.() ?? 0;
  for (const dir of [dirs.workspace, dirs.home, dirs.run]) {
    let st: Stats | undefined;
    try {
      st = lstatSync(dir);
    } catch {
      mkdirSync(dir, { mode: 0o700 });
      if (owner !== undefined) chownSync(dir, owner.uid, owner.gid);
      chmodSync(dir, 0o700);
      continue;
    }
    if (!st.isDirectory()) throw new BerthError('policy_refused', `${dir} is not a directory; remove it (berth rm) so the sandbox is made again`);
    if (st.uid !== uid) {
      throw new BerthError(
        'policy_refused',
        `${dir} belongs to uid ${st.uid} but this sandbox runs as uid ${uid}; a sandbox keeps the uid it was made with: ` +
          'remove it (berth rm with the same scope flags) and it is made again',
      );
    }
  }
}

/** The uid a sandbox was made with (its workspace dir's owner), or undefined when it does not exist yet. */
export function existingOwner(dirs: SandboxDirs): { uid: number; gid: number } | undefined {
  try {
    const st = lstatSync(dirs.workspace);
    return st.isDirectory() ? { uid: st.uid, gid: st.gid } : undefined;
  } catch {
    return undefined;
  }
}

/** Removes a stopped sandbox's dirs. Refuses anything not directly under `root`. Gone is success. */
export function removeSandboxDirs(root: string, dirs: SandboxDirs): void {
  const r = rootLayout(root).sandboxes;
  const d = resolve(dirs.root);
  if (dirname(d) !== r || !d.startsWith(r + sep)) throw new BerthError('internal', `${d} is not a sandbox dir of ${r}`);
  // rmSync removes links as links, never what they point to: a link the sandbox planted stays harmless.
  rmSync(d, { recursive: true, force: true });
}
