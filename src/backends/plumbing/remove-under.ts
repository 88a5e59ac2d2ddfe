import { realpath, rm } from 'node:fs/promises';
import path from 'node:path';
import { PolicyRefusedError } from '../../errors.js';

/**
 * Deletes `target` (recursively) only when it lies strictly under `root`, the one dir a backend
 * keeps its sandboxes' host dirs in. A record from another `BERTH_HOME` or a tampered state store
 * names something else: refused, nothing deleted. Compared by real path of the parent, so a link
 * on the way (a parent dir swapped for a symlink) cannot lead the delete out of the root; the
 * target itself, if it is a link, is removed as a link (`rm` never follows it). A target that is
 * already gone is success.
 *
 * @example
 * await removeUnder('/home/ana/.berth/sandboxes/local', '/home/ana/.berth/sandboxes/local/session_s1-0123456789ab');
 */
export async function removeUnder(root: string, target: string): Promise<void> {
  const rootAbs = path.resolve(root);
  const abs = path.resolve(target);
  const base = path.basename(abs);
  if (!abs.startsWith(rootAbs + path.sep) || base === '' || base === '.' || base === '..') {
    throw outside(abs, rootAbs);
  }
  const realRoot = await realpath(rootAbs).catch(() => undefined);
  if (realRoot === undefined) return; // no root: nothing of ours to delete
  const realParent = await realpath(path.dirname(abs)).catch(() => undefined);
  if (realParent === undefined) return; // its parent is gone: so is it
  if (realParent !== realRoot && !realParent.startsWith(realRoot + path.sep)) throw outside(abs, rootAbs);
  await rm(path.join(realParent, base), { recursive: true, force: true });
}

function outside(target: string, root: string): PolicyRefusedError {
  return new PolicyRefusedError(
    `refusing to delete "${target}": this backend's sandbox dirs live under "${root}" (is the state store from another BERTH_HOME?)`,
  );
}
