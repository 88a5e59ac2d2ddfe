import { appendFileSync, mkdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';

/*
 * The sandbox roots this installation has used, kept in its own home: `listManaged` (the reapers,
 * `berth list`) must find its sandboxes without a config in hand, and after `bwrap.root` changed.
 */

export function knownRootsFile(berthHome: string): string {
  return join(berthHome, 'sandboxes', 'bwrap', 'roots');
}

export function readKnownRoots(berthHome: string): string[] {
  try {
    return [...new Set(readFileSync(knownRootsFile(berthHome), 'utf8').split('\n').filter((l) => l.startsWith('/')))];
  } catch {
    return [];
  }
}

/** Adds `root` to the list (idempotent; an append of one line, so concurrent writers do not lose each other's). */
export function rememberRoot(berthHome: string, root: string): void {
  if (readKnownRoots(berthHome).includes(root)) return;
  const file = knownRootsFile(berthHome);
  mkdirSync(dirname(file), { recursive: true, mode: 0o700 });
  appendFileSync(file, `${root}\n`, { mode: 0o600 });
}
