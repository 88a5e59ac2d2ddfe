import { readdirSync, readFileSync } from 'node:fs';

/*
 * Processes as the host sees them (the tests run as root on the host, so a container's
 * processes are in the host's /proc too): find the ones a test started by a marker argument.
 */

/** Live processes whose argv contains `needle` (zombies excluded). */
export function pidsWithArg(needle: string): number[] {
  const found: number[] = [];
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d) || Number(d) === process.pid) continue;
    try {
      const stat = readFileSync(`/proc/${d}/stat`, 'utf8');
      if (/\) Z /.test(stat)) continue;
      const argv = readFileSync(`/proc/${d}/cmdline`, 'utf8').split('\0');
      if (argv.includes(needle)) found.push(Number(d));
    } catch {
      // gone meanwhile
    }
  }
  return found;
}

/** Waits (bounded) until no live process carries `needle`; returns the ones still there. */
export async function waitNoneWithArg(needle: string, timeoutMs = 5_000): Promise<number[]> {
  const deadline = Date.now() + timeoutMs;
  while (pidsWithArg(needle).length > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
  return pidsWithArg(needle);
}

/** Waits (bounded) until some live process carries `needle`. */
export async function waitSomeWithArg(needle: string, timeoutMs = 10_000): Promise<number[]> {
  const deadline = Date.now() + timeoutMs;
  while (pidsWithArg(needle).length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
  return pidsWithArg(needle);
}

/**
 * Waits (bounded) until some live process's argv is exactly `argv`, and returns those pids. A
 * wrapper that will `exec` the command can carry the same arguments before it does (kubernetes'
 * spawn prelude is `sh -c … sleep <m>`): this waits for the command itself.
 */
export async function waitExactArgv(argv: string[], timeoutMs = 10_000): Promise<number[]> {
  const want = argv.join('\0');
  const exact = () =>
    pidsWithArg(argv[argv.length - 1] ?? '').filter((p) => {
      try {
        return readFileSync(`/proc/${p}/cmdline`, 'utf8').replace(/\0$/, '') === want;
      } catch {
        return false;
      }
    });
  const deadline = Date.now() + timeoutMs;
  while (exact().length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
  return exact();
}

export function killAll(pids: number[]): void {
  for (const p of pids) {
    try {
      process.kill(p, 'SIGKILL');
    } catch {
      // already gone
    }
  }
}
