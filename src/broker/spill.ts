import { lstatSync, readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import type { BerthConfig } from '../setup/berth-config.js';

const DAY_MS = 24 * 60 * 60 * 1000;

/** Where shells spill full output: `$BERTH_HOME/spill`. */
export function spillDirOf(berthHome: string): string {
  return join(berthHome, 'spill');
}

/**
 * How old a spill file must be before start-up cleanup removes it: the longest idle time of any
 * profile, and at least 24 h. A shell deletes its own files when it closes and the CLI writes
 * none (it streams everything), so what is left was kept by a process that died. Another berth
 * process may share `$BERTH_HOME` and still hold a live shell whose last `fullOutputPath` its
 * caller may still read, so nothing younger than that shell could be idle for is touched.
 */
export function spillMaxAgeMs(config: BerthConfig): number {
  const idle = [config.base, ...Object.values(config.profiles)].map((p) => p.lifecycle.idleSeconds * 1000);
  return Math.max(DAY_MS, ...idle);
}

/**
 * Removes spill files (`*.out`, regular files only) older than `maxAgeMs` from `dir`. Never
 * throws: a missing dir or a file that cannot be removed is skipped. Returns how many went.
 */
export function cleanSpillDir(dir: string, maxAgeMs: number, nowMs = Date.now()): number {
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch {
    return 0;
  }
  let removed = 0;
  for (const name of names) {
    if (!name.endsWith('.out')) continue;
    const path = join(dir, name);
    try {
      const st = lstatSync(path);
      if (!st.isFile() || nowMs - st.mtimeMs <= maxAgeMs) continue;
      rmSync(path, { force: true });
      removed += 1;
    } catch {
      // gone meanwhile, or not ours to remove
    }
  }
  return removed;
}
