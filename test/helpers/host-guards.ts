import { mkdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import type { HostGuard } from '../../src/egress/host-guard.js';

/*
 * The host guards are one set of iptables chains per host, and berth's docker backend installs
 * its guard whenever it creates a sandbox: test runs on one machine (worktrees side by side, a
 * full suite beside a single file) would remove each other's. So the suites install, check and
 * remove a private copy (same rules and matches, chains of their own names), and hold a lock
 * against each other: a directory made atomically, holding the holder's pid (a holder that died
 * leaves a stale lock, which the next taker removes).
 */

/** `guard` with chains named `<name>-<tag>` (at most 28 characters: keep `tag` to 6). */
export function privateGuard(guard: HostGuard, tag: string): HostGuard {
  return { what: `${guard.what} (test ${tag})`, chains: guard.chains.map((c) => ({ ...c, name: `${c.name}-${tag}` })) };
}

const LOCK = '/run/berth-test-host-guard.lock';

function holderAlive(): boolean {
  try {
    const pid = Number(readFileSync(`${LOCK}/pid`, 'utf8'));
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** Waits (bounded) for the host-guard lock; returns its release. */
export async function lockHostGuards(timeoutMs = 600_000): Promise<() => void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      mkdirSync(LOCK);
      writeFileSync(`${LOCK}/pid`, String(process.pid));
      return () => rmSync(LOCK, { recursive: true, force: true });
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    }
    // A holder between mkdir and writing its pid reads as dead for a moment: only a lock older than that is stale.
    if (!holderAlive() && Date.now() - (statMtime() ?? Date.now()) > 2_000) rmSync(LOCK, { recursive: true, force: true });
    if (Date.now() > deadline) throw new Error(`the host-guard test lock ${LOCK} stayed taken for ${timeoutMs} ms (pid in ${LOCK}/pid)`);
    await new Promise((r) => setTimeout(r, 250));
  }
}

function statMtime(): number | undefined {
  try {
    return statSync(LOCK).mtimeMs;
  } catch {
    return undefined;
  }
}
