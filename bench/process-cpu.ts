import { readdirSync, readFileSync } from 'node:fs';
import { PerformanceObserver } from 'node:perf_hooks';

/*
 * CPU time by process group on this machine, read from /proc (Linux): which part of a burst of
 * commands was berth, the engine, the engine's per-container shims, and the sandboxes' own processes.
 */

const TICKS_PER_SECOND = 100;

/** Where a process's CPU time is counted. */
export type CpuGroup = 'berth' | 'dockerd' | 'containerd' | 'shims' | 'other';

/** CPU seconds (user + system) per group, of the processes alive now (berth's: this process's, since it began); only differences mean anything. */
export type CpuSnapshot = Record<CpuGroup, number>;

function groupOf(comm: string): CpuGroup {
  if (comm === 'dockerd') return 'dockerd';
  if (comm === 'containerd') return 'containerd';
  if (comm.startsWith('containerd-shim')) return 'shims';
  return 'other';
}

/** This process's CPU seconds (user + system, all its threads). */
function ownSeconds(): number {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1e6;
}

/**
 * One pass over /proc (a process that ends between two snapshots takes its time with it). This
 * process's own time is read apart, at the pass's start (`own: 'start'`, for a snapshot taken after
 * what is measured) or its end (`'end'`, for one taken before), so the pass itself never counts as
 * berth's: with a thousand sandboxes it reads thousands of files, a few hundred ms of CPU.
 */
export function cpuSnapshot(own: 'start' | 'end'): CpuSnapshot {
  const atStart = ownSeconds();
  const out: CpuSnapshot = { berth: 0, dockerd: 0, containerd: 0, shims: 0, other: 0 };
  for (const name of readdirSync('/proc')) {
    const pid = Number(name);
    if (!Number.isInteger(pid) || pid === process.pid) continue;
    let stat: string;
    try {
      stat = readFileSync(`/proc/${pid}/stat`, 'latin1');
    } catch {
      continue;
    }
    // comm is in parentheses and may hold spaces; the fields after it are space separated.
    const close = stat.lastIndexOf(')');
    const comm = stat.slice(stat.indexOf('(') + 1, close);
    const fields = stat.slice(close + 2).split(' ');
    const ticks = Number(fields[11]) + Number(fields[12]);
    out[groupOf(comm)] += ticks / TICKS_PER_SECOND;
  }
  out.berth = own === 'start' ? atStart : ownSeconds();
  return out;
}

/** `after - before` per group, as text: "berth 0.21 s, dockerd 0.40 s, ...". */
export function cpuSpent(before: CpuSnapshot, after: CpuSnapshot): string {
  return (Object.keys(before) as CpuGroup[])
    .map((g) => `${g === 'other' ? 'sandboxes and the rest' : g} ${Math.max(0, after[g] - before[g]).toFixed(2)} s`)
    .join(', ');
}

/**
 * This process's garbage-collection pauses, summed (the bench's own driving too; berth runs in
 * it): `ms()` for the total so far, `stop` when done. Part of the "berth" CPU above, told apart.
 * Entries arrive a moment after each pause, so a pause at the very end of a round may count in
 * the next.
 */
export function gcClock(): { ms(): number; stop(): void } {
  let total = 0;
  const observer = new PerformanceObserver((list) => {
    for (const e of list.getEntries()) total += e.duration;
  });
  observer.observe({ entryTypes: ['gc'] });
  return { ms: () => total, stop: () => observer.disconnect() };
}
