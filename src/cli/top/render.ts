import type { StoreOverview } from '../../broker/broker-types.js';
import type { SandboxUsage } from '../../broker/sandbox-usage.js';
import type { AuditEntry } from '../../broker/state/audit-table.js';
import type { JobRecord } from '../../broker/state/job-table.js';
import { terminalText } from '../terminal-text.js';
import { table, type Column } from './columns.js';
import { bytes, clock, duration } from './format.js';
import { topRows, type EngineFigures, type TopRow } from './rows.js';

/** What one frame shows: the store's view, and the engines' figures once they answered. */
export interface TopView {
  store: StoreOverview;
  /** The engines' latest answer; undefined until the first. */
  figures: EngineFigures | undefined;
  /** The read before it, for CPU. */
  previous: ReadonlyMap<string, SandboxUsage>;
}

export interface FrameOptions {
  nowMs: number;
  /** Terminal width: columns drop by priority to fit it, and no line is wider. */
  columns: number;
  /** Terminal height: sections are cut (with "… N more") to fit it; undefined: no bound. */
  rows: number | undefined;
  /** Seconds between frames, for the header (undefined: a single frame). */
  intervalSeconds: number | undefined;
}

const MIB = 1024 * 1024;
/** A figure still being read. */
const PENDING = '…';

/** A figure of a row: pending while its read is out, `-` where the backend cannot tell. */
function figure(r: TopRow, v: number | undefined, text: (n: number) => string, needsTwoSamples = false): string {
  if (r.pending === 'engine' || (needsTwoSamples && r.pending === 'cpu')) return PENDING;
  return v === undefined ? '-' : text(v);
}

/*
 * The columns of each table, in display order; `priority` says which stay as the terminal narrows
 * (1 stays longest). A sandbox: its key, state and what it uses first, then whose it is, then
 * how long it idled and its sessions; its profile, backend and memory limit go first.
 */
const SANDBOX_COLUMNS: Array<Column<TopRow>> = [
  { title: 'TENANT', width: 10, priority: 5, value: (r) => r.tenant },
  { title: 'PROFILE', width: 8, priority: 9, value: (r) => r.profile },
  { title: 'SANDBOX', width: 20, grow: 40, priority: 1, value: (r) => r.key },
  { title: 'BACKEND', width: 7, priority: 10, value: (r) => r.backend },
  { title: 'STATE', width: 10, priority: 2, value: (r) => r.state ?? PENDING },
  { title: 'CPU%', width: 6, priority: 3, right: true, value: (r) => figure(r, r.cpuPercent, (n) => n.toFixed(1), true) },
  { title: 'MEMORY', width: 8, priority: 4, right: true, value: (r) => figure(r, r.memoryBytes, bytes) },
  { title: 'MEM MAX', width: 8, priority: 11, right: true, value: (r) => figure(r, r.memoryLimitBytes, bytes) },
  { title: 'PIDS', width: 5, priority: 6, right: true, value: (r) => figure(r, r.processes, String) },
  { title: 'IDLE', width: 6, priority: 7, right: true, value: (r) => duration(r.idleMs) },
  { title: 'SESS', width: 4, priority: 8, right: true, value: (r) => String(r.openSessions) },
];

type TenantLine = StoreOverview['tenants'][number];
const TENANT_COLUMNS: Array<Column<TenantLine>> = [
  { title: 'TENANT', width: 12, grow: 20, priority: 1, value: (t) => t.tenant },
  { title: 'SANDBOXES', width: 9, priority: 2, right: true, value: (t) => `${t.usage.sandboxes}/${t.quota.sandboxes}` },
  { title: 'MEMORY LIMITS', width: 19, priority: 3, right: true, value: (t) => `${bytes(t.usage.memoryMb * MIB)} / ${bytes(t.quota.memoryMb * MIB)}` },
  { title: 'DISK BOUNDS', width: 19, priority: 4, right: true, value: (t) => `${bytes(t.usage.diskMb * MIB)} / ${bytes(t.quota.diskMb * MIB)}` },
];

interface JobLine { job: JobRecord; nowMs: number }
const JOB_COLUMNS: Array<Column<JobLine>> = [
  { title: 'TENANT', width: 10, priority: 6, value: ({ job }) => job.tenant },
  { title: 'SESSION', width: 14, priority: 1, value: ({ job }) => job.session },
  { title: 'JOB', width: 20, priority: 3, value: ({ job }) => job.id },
  { title: 'STATUS', width: 10, priority: 2, value: ({ job }) => (job.exitCode === null ? job.status : `${job.status} ${job.exitCode}`) },
  { title: 'AGE', width: 6, priority: 5, right: true, value: ({ job, nowMs }) => duration(Math.max(0, nowMs - job.startedMs)) },
  { title: 'COMMAND', width: 12, grow: 200, priority: 4, value: ({ job }) => job.command },
];

const CALL_COLUMNS: Array<Column<AuditEntry>> = [
  { title: 'TIME', width: 8, priority: 1, value: (e) => clock(e.timeMs) },
  { title: 'TENANT', width: 10, priority: 5, value: (e) => e.tenant },
  { title: 'SESSION', width: 14, priority: 3, value: (e) => e.session ?? '-' },
  { title: 'KIND', width: 6, priority: 6, value: (e) => e.kind },
  {
    title: 'RESULT', width: 16, priority: 4,
    value: (e) => [e.exitCode === null ? '' : `exit ${e.exitCode}`, e.durationMs === null ? '' : `${e.durationMs} ms`].filter((x) => x !== '').join(' '),
  },
  { title: 'COMMAND', width: 12, grow: 200, priority: 2, value: (e) => e.command ?? '' },
];

/** A part of the frame: its title and header lines, its row lines, and what to say when there is none. */
interface Section {
  head: string[];
  body: string[];
  none: string | undefined;
  /** Lower is kept longer when the terminal is short. */
  priority: number;
  /** What one row is, for "… N more sandboxes". */
  noun: string;
}

/** Rows each section keeps before any gets more (when the terminal is short). */
const MIN_BODY = 3;

/**
 * The lines each section shows in `height` lines (one blank line before each): first every
 * section its head and up to MIN_BODY rows (by priority), then the rest by priority. A section
 * with no room left is left out; a cut one ends with "… N more".
 */
function fitSections(sections: readonly Section[], height: number | undefined): Map<Section, string[]> {
  const full = (s: Section): string[] => [...s.head, ...(s.body.length === 0 && s.none !== undefined ? [s.none] : s.body)];
  const out = new Map<Section, string[]>();
  if (height === undefined) {
    for (const s of sections) out.set(s, full(s));
    return out;
  }
  const order = [...sections].sort((a, b) => a.priority - b.priority);
  const given = new Map<Section, number>();
  let left = height;
  for (const s of order) {
    const want = 1 + s.head.length + Math.min(MIN_BODY, Math.max(1, s.body.length));
    if (left < 1 + s.head.length + 1) continue;
    const n = Math.min(want, left);
    given.set(s, n - 1);
    left -= n;
  }
  for (const s of order) {
    const had = given.get(s);
    if (had === undefined) continue;
    const extra = Math.min(left, full(s).length - had);
    given.set(s, had + extra);
    left -= extra;
  }
  for (const s of sections) {
    const n = given.get(s);
    if (n === undefined) continue;
    const lines = full(s);
    if (lines.length <= n) {
      out.set(s, lines);
      continue;
    }
    const rows = n - s.head.length - 1;
    out.set(s, [...s.head, ...s.body.slice(0, rows), `… ${s.body.length - rows} more ${s.noun}`]);
  }
  return out;
}

/** The jobs, by session (the session whose job started last first), newest first within one. */
function bySession(jobs: readonly JobRecord[]): JobRecord[] {
  const groups = new Map<string, JobRecord[]>();
  for (const j of jobs) {
    const k = JSON.stringify([j.tenant, j.profile, j.session]);
    groups.set(k, [...(groups.get(k) ?? []), j]);
  }
  return [...groups.values()].flat();
}

/** The summary line: the parts that fit, most telling first. */
function summary(rows: readonly TopRow[], o: FrameOptions): string {
  const states = new Map<string, number>();
  for (const r of rows) if (r.state !== undefined) states.set(r.state, (states.get(r.state) ?? 0) + 1);
  const stateText = [...states].map(([s, n]) => `${n} ${s}`).join(', ');
  const open = rows.reduce((n, r) => n + r.openSessions, 0);
  const reading = rows.some((r) => r.pending === 'engine') ? 'reading the engines…' : rows.some((r) => r.pending === 'cpu') ? 'measuring CPU…' : '';
  const parts = [
    `berth top  ${clock(o.nowMs)} UTC`,
    `${rows.length} sandbox${rows.length === 1 ? '' : 'es'}${stateText === '' ? '' : ` (${stateText})`}, ${open} open session${open === 1 ? '' : 's'}`,
    reading,
    o.intervalSeconds === undefined ? '' : `every ${o.intervalSeconds}s, Ctrl-C quits`,
  ].filter((p) => p !== '');
  while (parts.length > 1 && parts.join('  ').length > o.columns) parts.pop();
  return parts.join('  ').slice(0, o.columns);
}

/**
 * One frame of `berth top`: a summary line, each tenant against its limits, the sandboxes
 * (busiest first) with what they use, the latest jobs by session and the latest calls. It fits
 * `columns` (columns drop by priority) and `rows` (sections are cut, the sandboxes last). Every
 * value a caller or an agent chose goes through `terminalText`, so nothing in a frame can move
 * the cursor or rewrite the operator's screen.
 */
export function renderFrame(view: TopView, o: FrameOptions): string {
  const { store } = view;
  const rows = topRows(store.sandboxes, view.figures, view.previous, o.nowMs);
  const w = o.columns;
  const tenantTable = table(TENANT_COLUMNS, store.tenants, w);
  const tenants: Section = { head: tenantTable.slice(0, 1), body: tenantTable.slice(1), none: undefined, priority: 4, noun: 'tenants' };
  const sandboxTable = table(SANDBOX_COLUMNS, rows, w);
  const sandboxes: Section = { head: sandboxTable.slice(0, 1), body: sandboxTable.slice(1), none: '(no sandboxes)', priority: 1, noun: 'sandboxes' };
  const jobTable = table(JOB_COLUMNS, bySession(store.recentJobs).map((job) => ({ job, nowMs: o.nowMs })), w);
  const jobs: Section = { head: ['JOBS', ...jobTable.slice(0, 1)], body: jobTable.slice(1), none: '(none)', priority: 2, noun: 'jobs' };
  const calls: Section = {
    head: ['RECENT CALLS'], body: table(CALL_COLUMNS, store.recentCalls, w).slice(1), none: '(none yet)', priority: 3, noun: 'calls',
  };
  const shown = [...(store.tenants.length > 0 ? [tenants] : []), sandboxes, jobs, calls];
  const fitted = fitSections(shown, o.rows === undefined ? undefined : o.rows - 1);
  const lines = [summary(rows, o)];
  for (const s of shown) {
    const part = fitted.get(s);
    if (part !== undefined) lines.push('', ...part);
  }
  return lines.map((l) => terminalText(l).slice(0, w)).join('\n');
}
