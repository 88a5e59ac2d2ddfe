import type Dockerode from 'dockerode';
import type { SandboxUsage } from '../backend.js';
import { measureDisk } from './disk-usage.js';
import { withTimeout } from './engine.js';

/** Bound of one stats request (the engine reads the container's cgroups; seconds under load). */
const STATS_TIMEOUT_MS = 5_000;
/** A memory limit at or above this is the cgroup's "unlimited". */
const UNLIMITED_BYTES = 2 ** 60;

/** The fields of the engine's stats answer berth reads (cgroup v1 and v2 name the file cache differently). */
interface EngineStats {
  cpu_stats?: { cpu_usage?: { total_usage?: number } };
  memory_stats?: { usage?: number; limit?: number; stats?: Record<string, number | undefined> };
  pids_stats?: { current?: number; limit?: number };
}

/**
 * One container's resource use from the engine's one-shot stats: nothing runs in the container,
 * so a sandbox out of pids or memory is still measured. Memory is counted as `docker stats` counts
 * it (the page cache that can be dropped is not use); undefined when the engine does not answer.
 */
export async function containerUsage(docker: Dockerode, ref: string): Promise<SandboxUsage | undefined> {
  const opts = { stream: false, 'one-shot': true } as { stream: false };
  const stats = (await withTimeout(docker.getContainer(ref).stats(opts), STATS_TIMEOUT_MS, () => new Error('stats timed out'))) as EngineStats;
  return usageOf(stats, Date.now());
}

/**
 * `containerUsage` plus the size of the container's writable layer as the engine counts it
 * (`SizeRw`, what docker.diskMb bounds besides berth's own dirs): the dashboard's disk column.
 * A layer the engine cannot size leaves `diskBytes` out; the rest still counts.
 */
export async function containerUsageWithDisk(docker: Dockerode, ref: string): Promise<SandboxUsage | undefined> {
  const [usage, disk] = await Promise.all([containerUsage(docker, ref), measureDisk(docker, ref, []).catch(() => undefined)]);
  return usage === undefined || disk === undefined ? usage : { ...usage, diskBytes: disk.layerBytes };
}

/** The engine's stats answer as berth's usage. Pure. */
export function usageOf(stats: EngineStats, sampledMs: number): SandboxUsage | undefined {
  const cpu = stats.cpu_stats?.cpu_usage?.total_usage;
  const mem = stats.memory_stats;
  if (typeof cpu !== 'number' || typeof mem?.usage !== 'number') return undefined;
  const cache = mem.stats?.['total_inactive_file'] ?? mem.stats?.['inactive_file'] ?? 0;
  const limit = mem.limit;
  const pids = stats.pids_stats;
  return {
    sampledMs,
    cpuNanos: cpu,
    memoryBytes: Math.max(0, mem.usage - cache),
    memoryLimitBytes: typeof limit === 'number' && limit > 0 && limit < UNLIMITED_BYTES ? limit : undefined,
    processes: typeof pids?.current === 'number' ? pids.current : undefined,
    processLimit: typeof pids?.limit === 'number' && pids.limit > 0 ? pids.limit : undefined,
  };
}
