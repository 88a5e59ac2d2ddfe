import type { Overview, SandboxInfo } from '../../broker/broker-types.js';
import type { SandboxState } from '../../broker/sandbox-measures.js';
import { cpuPercent, type SandboxUsage } from '../../broker/sandbox-usage.js';

/** What the engines said of each sandbox in one read, by `rowId`. */
export type EngineFigures = Map<string, { state: SandboxState; usage: SandboxUsage | undefined }>;

/** One sandbox row as `berth top` shows it. */
export interface TopRow {
  tenant: string;
  profile: string;
  key: string;
  backend: string;
  /** Undefined until the engines answered. */
  state: SandboxState | undefined;
  /** Percent of one core since the previous sample; undefined before a second sample or where the backend cannot tell. */
  cpuPercent: number | undefined;
  memoryBytes: number | undefined;
  memoryLimitBytes: number | undefined;
  processes: number | undefined;
  processLimit: number | undefined;
  openSessions: number;
  idleMs: number;
  /** What is still being read: the engines' answer, or (with it) the second sample CPU needs. */
  pending: 'engine' | 'cpu' | undefined;
}

/** A sandbox's id across reads: tenant, profile and key. */
function rowId(s: Pick<SandboxInfo, 'tenant' | 'profile' | 'sandboxKey'>): string {
  return `${s.tenant}\u0000${s.profile ?? ''}\u0000${s.sandboxKey}`;
}

/** The engines' answer of one `Broker.overview`, by row. */
export function engineFigures(view: Pick<Overview, 'sandboxes'>): EngineFigures {
  return new Map(view.sandboxes.map((s) => [rowId(s), { state: s.state, usage: s.usage }]));
}

/** Each sandbox's usage in one read, for the next read's CPU percent. */
export function usageByRow(figures: EngineFigures | undefined): Map<string, SandboxUsage> {
  const out = new Map<string, SandboxUsage>();
  for (const [id, f] of figures ?? []) if (f.usage !== undefined) out.set(id, f.usage);
  return out;
}

/**
 * The rows: every sandbox the store records, with what the engines said of it in `figures` (not
 * in them yet: pending) and its CPU against `previous`. Busiest first (CPU, then memory), then the most
 * recently used.
 */
export function topRows(
  sandboxes: readonly SandboxInfo[], figures: EngineFigures | undefined, previous: ReadonlyMap<string, SandboxUsage>, nowMs: number,
): TopRow[] {
  const rows = sandboxes.map((s): TopRow => {
    const id = rowId(s);
    const f = figures?.get(id);
    const u = f?.usage;
    const cpu = u === undefined ? undefined : cpuPercent(previous.get(id), u);
    return {
      tenant: s.tenant, profile: s.profile ?? '-', key: s.sandboxKey, backend: s.backend,
      state: f?.state,
      cpuPercent: cpu,
      memoryBytes: u?.memoryBytes, memoryLimitBytes: u?.memoryLimitBytes, processes: u?.processes, processLimit: u?.processLimit,
      openSessions: s.sessions.filter((x) => x.open).length,
      idleMs: Math.max(0, nowMs - s.lastUsedMs),
      pending: f === undefined ? 'engine' : u !== undefined && cpu === undefined ? 'cpu' : undefined,
    };
  });
  return rows.sort((a, b) => (b.cpuPercent ?? -1) - (a.cpuPercent ?? -1) || (b.memoryBytes ?? -1) - (a.memoryBytes ?? -1) || a.idleMs - b.idleMs);
}
