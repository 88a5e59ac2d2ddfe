import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { parseMountInfo } from '../../src/backends/docker/mount-table.js';

/*
 * What a test left mounted or attached on the host: the mounts under a dir (as `mount` lists
 * them, read from /proc/self/mountinfo) and the loop devices whose backing file lies under it
 * (`losetup -a`). Suites check both after remove, close and the reaper, and take down whatever
 * they made before deleting their dirs.
 */

/** Mount points at or under `dir`, deepest first. */
export function mountsUnder(dir: string): string[] {
  const root = path.resolve(dir);
  return parseMountInfo(readFileSync('/proc/self/mountinfo', 'utf8'))
    .map((m) => m.target)
    .filter((t) => t === root || t.startsWith(root + path.sep))
    .sort((a, b) => b.length - a.length);
}

/** `losetup -a` lines whose backing file lies under `dir`. */
export function loopDevicesUnder(dir: string): string[] {
  const root = path.resolve(dir);
  const out = execFileSync('losetup', ['-a'], { encoding: 'utf8' });
  return out.split('\n').filter((l) => l.includes(`(${root}/`));
}

/**
 * Takes down every mount under `dir` (lazily when busy); returns what it unmounted. A mount that
 * is gone by the time its turn comes (a berth process unmounting its own as it ends) is skipped;
 * one still listed after both tries is an error naming it.
 */
export function unmountAllUnder(dir: string): string[] {
  const done: string[] = [];
  for (const target of mountsUnder(dir)) {
    const tries = [['--', target], ['-l', '--', target]];
    let unmounted = false;
    for (const args of tries) {
      if (!mountsUnder(dir).includes(target)) break;
      try {
        execFileSync('umount', args, { stdio: 'ignore' });
        unmounted = true;
        break;
      } catch {
        // gone meanwhile, or busy: look again
      }
    }
    if (unmounted) done.push(`mount ${target}`);
    else if (mountsUnder(dir).includes(target)) throw new Error(`could not unmount ${target} (umount and umount -l both failed); see grep ${target} /proc/self/mountinfo`);
  }
  return done;
}
