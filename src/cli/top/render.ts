import type { Overview } from '../../broker/broker-types.js';
import { cpuPercent, type SandboxUsage } from '../../broker/sandbox-usage.js';
import { terminalText } from '../terminal-text.js';

/** One sandbox row as `berth top` shows it. */
export interface TopRow {
  tenant: string;
  profile: string;
  key: string;
  backend: string;
  state: string;
  /** Percent of one core since the previous sample; undefined before a second sample. */
  cpuPercent: number | undefined;
  memoryBytes: number | undefined;
  memoryLimitBytes: number | undefined;
  processes: number | undefined;
  processLimit: number | undefined;
  openSessions: number;
  idleMs: number;
}

/** The rows of a view: busiest first (CPU, then memory), then the most recently used. */
export function topRows(view: Overview, previous: ReadonlyMap<string, SandboxUsage>, nowMs: number): TopRow[] {
  const rows = view.sandboxes.map((s): TopRow => {
    const u = s.usage;
    const id = `${s.tenant}\u0000${s.profile ?? ''}\u0000${s.sandboxKey}`;
    return {
      tenant: s.tenant, profile: s.profile ?? '-', key: s.sandboxKey, backend: s.backend, state: s.state,
      cpuPercent: u === undefined ? undefined : cpuPercent(previous.get(id), u),
      memoryBytes: u?.memoryBytes, memoryLimitBytes: u?.memoryLimitBytes, processes: u?.processes, processLimit: u?.processLimit,
      openSessions: s.sessions.filter((x) => x.open).length,
      idleMs: Math.max(0, nowMs - s.lastUsedMs),
    };
  });
  return rows.sort((a, b) => (b.cpuPercent ?? -1) - (a.cpuPercent ?? -1) || (b.memoryBytes ?? -1) - (a.memoryBytes ?? -1) || a.idleMs - b.idleMs);
}

/** Each sandbox's usage by a key that survives a refresh, for the next frame's CPU percent. */
export function usageByRow(view: Overview): Map<string, SandboxUsage> {
  const out = new Map<string, SandboxUsage>();
  for (const s of view.sandboxes) if (s.usage !== undefined) out.set(`${s.tenant}\u0000${s.profile ?? ''}\u0000${s.sandboxKey}`, s.usage);
  return out;
}

const MIB = 1024 * 1024;

/** 1536 → '1.5 KiB'. */
export function bytes(n: number | undefined): string {
  if (n === undefined) return '-';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let v = n;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i += 1;
  }
  return i === 0 ? `${v} B` : `${v.toFixed(v < 10 ? 1 : 0)} ${units[i]}`;
}

/** 93_000 → '1m33s'. */
export function duration(ms: number): string {
  const s = Math.floor(ms / 1000);
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, '0')}s`;
  if (s < 86_400) return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, '0')}m`;
  return `${Math.floor(s / 86_400)}d${Math.floor((s % 86_400) / 3600)}h`;
}

/** A cell: made terminal-safe, cut to `width` (with `…`) and padded. */
function cell(text: string, width: number, right = false): string {
  const safe = terminalText(text);
  const cut = safe.length > width ? `${safe.slice(0, Math.max(0, width - 1))}…` : safe;
  return right ? cut.padStart(width) : cut.padEnd(width);
}

function clock(ms: number): string {
  return new Date(ms).toISOString().slice(11, 19);
}

export interface FrameOptions {
  nowMs: number;
  /** Terminal width: every line is cut to it. */
  columns: number;
  /** Seconds between frames, for the header (undefined: a single frame). */
  intervalSeconds: number | undefined;
}

/**
 * One frame of `berth top`: a summary line, the sandboxes (busiest first) with their resource use,
 * and the latest calls of every tenant. Every value a caller or an agent chose goes through
 * `terminalText`, so nothing in a frame can move the cursor or rewrite the operator's screen.
 */
export function renderFrame(view: Overview, previous: ReadonlyMap<string, SandboxUsage>, o: FrameOptions): string {
  const rows = topRows(view, previous, o.nowMs);
  const states = new Map<string, number>();
  for (const r of rows) states.set(r.state, (states.get(r.state) ?? 0) + 1);
  const stateText = [...states].map(([s, n]) => `${n} ${s}`).join(', ');
  const open = rows.reduce((n, r) => n + r.openSessions, 0);
  const lines: string[] = [];
  lines.push(`berth top  ${clock(o.nowMs)} UTC  ${rows.length} sandbox${rows.length === 1 ? '' : 'es'}${stateText === '' ? '' : ` (${stateText})`}, ` +
    `${open} open session${open === 1 ? '' : 's'}${o.intervalSeconds === undefined ? '' : `  every ${o.intervalSeconds}s, Ctrl-C quits`}`);
  lines.push('');
  if (view.tenants.length > 0) {
    lines.push(`${cell('TENANT', 12)} ${cell('SANDBOXES', 13, true)} ${cell('MEMORY LIMITS', 23, true)} ${cell('DISK BOUNDS', 23, true)}`);
    for (const t of view.tenants) {
      lines.push(`${cell(t.tenant, 12)} ${cell(`${t.usage.sandboxes}/${t.quota.sandboxes}`, 13, true)} ` +
        `${cell(`${bytes(t.usage.memoryMb * MIB)} / ${bytes(t.quota.memoryMb * MIB)}`, 23, true)} ${cell(`${bytes(t.usage.diskMb * MIB)} / ${bytes(t.quota.diskMb * MIB)}`, 23, true)}`);
    }
    lines.push('');
  }
  lines.push(`${cell('TENANT', 12)} ${cell('PROFILE', 10)} ${cell('SANDBOX', 26)} ${cell('BACKEND', 8)} ${cell('STATE', 8)} ${cell('CPU%', 6, true)} ` +
    `${cell('MEMORY', 21, true)} ${cell('PIDS', 9, true)} ${cell('SESS', 4, true)} ${cell('IDLE', 7, true)}`);
  for (const r of rows) {
    const mem = r.memoryBytes === undefined ? '-' : r.memoryLimitBytes === undefined ? bytes(r.memoryBytes) : `${bytes(r.memoryBytes)} / ${bytes(r.memoryLimitBytes)}`;
    const pids = r.processes === undefined ? '-' : r.processLimit === undefined ? String(r.processes) : `${r.processes}/${r.processLimit}`;
    lines.push(`${cell(r.tenant, 12)} ${cell(r.profile, 10)} ${cell(r.key, 26)} ${cell(r.backend, 8)} ${cell(r.state, 8)} ` +
      `${cell(r.cpuPercent === undefined ? '-' : r.cpuPercent.toFixed(1), 6, true)} ${cell(mem, 21, true)} ${cell(pids, 9, true)} ` +
      `${cell(String(r.openSessions), 4, true)} ${cell(duration(r.idleMs), 7, true)}`);
  }
  if (rows.length === 0) lines.push('(no sandboxes)');
  lines.push('');
  lines.push('RECENT CALLS');
  for (const e of view.recentCalls) {
    const exit = e.exitCode === null ? '' : ` exit ${e.exitCode}`;
    const took = e.durationMs === null ? '' : ` ${e.durationMs} ms`;
    lines.push(`${clock(e.timeMs)} ${cell(e.tenant, 12)} ${cell(e.session ?? '-', 16)} ${cell(e.kind, 6)}${cell(`${exit}${took}`, 18)} ${terminalText(e.command ?? '')}`);
  }
  if (view.recentCalls.length === 0) lines.push('(none yet)');
  return lines.map((l) => (l.length > o.columns ? l.slice(0, o.columns) : l)).join('\n');
}
