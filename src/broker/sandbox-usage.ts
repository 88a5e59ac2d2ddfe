import type { SandboxUsage } from '../backends/backend.js';

export type { SandboxUsage } from '../backends/backend.js';

/**
 * CPU use between two samples of one sandbox, in percent of one core (as `docker stats` shows
 * it: 200 is two cores busy); undefined without an earlier sample, or when the counter went
 * back (the sandbox was recreated).
 */
export function cpuPercent(prev: SandboxUsage | undefined, now: SandboxUsage): number | undefined {
  if (prev === undefined || now.sampledMs <= prev.sampledMs || now.cpuNanos < prev.cpuNanos) return undefined;
  return ((now.cpuNanos - prev.cpuNanos) / ((now.sampledMs - prev.sampledMs) * 1e6)) * 100;
}
