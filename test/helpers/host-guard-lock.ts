import { mkdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';

/*
 * The host guards are one set of iptables chains per host: two test runs on one machine (two
 * worktrees, or a full suite beside a single file) would install and remove each other's. The
 * suites that touch them hold this lock: a directory made atomically, holding the holder's pid
 * (a holder that died leaves a stale lock, which the next taker removes).
 */

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
