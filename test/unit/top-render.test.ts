import { describe, expect, it } from 'vitest';
import type { SandboxUsage } from '../../src/backends/backend.js';
import { usageOf } from '../../src/backends/docker/usage.js';
import type { Overview, StoreOverview } from '../../src/broker/broker-types.js';
import type { JobRecord } from '../../src/broker/state/job-table.js';
import { terminalText } from '../../src/cli/terminal-text.js';
import { cpuPercent } from '../../src/broker/sandbox-usage.js';
import { bytes, duration } from '../../src/cli/top/format.js';
import { renderFrame, type FrameOptions, type TopView } from '../../src/cli/top/render.js';
import { engineFigures, topRows, usageByRow } from '../../src/cli/top/rows.js';

const usage = (sampledMs: number, cpuNanos: number, memoryBytes = 1 << 20): SandboxUsage => ({
  sampledMs, cpuNanos, memoryBytes, memoryLimitBytes: 512 << 20, processes: 3, processLimit: 256,
});

function job(extra: Partial<JobRecord> = {}): JobRecord {
  return {
    id: 'job_0123456789abcdef', tenant: 'acme', profile: 'default', session: 'chat-1', user: null, digest: 'd', sandboxKey: 'session:chat-1',
    scope: '{}', command: 'sleep 300', dir: '/tmp/j', startedMs: 0, status: 'running', exitCode: null, endedMs: null, ...extra,
  };
}

function sandbox(key: string, u: SandboxUsage | undefined, extra: Partial<Overview['sandboxes'][number]> = {}): Overview['sandboxes'][number] {
  return {
    sandboxKey: key, tenant: 'acme', profile: 'default', backend: 'docker', rule: 'session', persistent: false, name: key,
    mount: null, createdMs: 0, lastUsedMs: 10_000, sessions: [{ session: 's', open: true }], state: 'running', usage: u, ...extra,
  };
}

/** A view of `sandboxes` as the store and (unless `engines` is false) the engines tell it. */
function topView(o: Partial<StoreOverview> & { sandboxes?: Overview['sandboxes']; engines?: boolean; previous?: TopView['previous'] } = {}): TopView {
  const sandboxes = o.sandboxes ?? [];
  return {
    store: { sandboxes, tenants: o.tenants ?? [], recentCalls: o.recentCalls ?? [], recentJobs: o.recentJobs ?? [] },
    figures: o.engines === false ? undefined : engineFigures({ sandboxes }),
    previous: o.previous ?? new Map(),
  };
}

const wide = (nowMs = 0): FrameOptions => ({ nowMs, columns: 200, rows: undefined, intervalSeconds: undefined });

describe('berth top: the numbers', () => {
  it('CPU is the change of the counter over the wall time between two samples, in percent of one core', () => {
    expect(cpuPercent(usage(1_000, 0), usage(2_000, 500_000_000))).toBe(50);
    expect(cpuPercent(usage(1_000, 0), usage(2_000, 2_000_000_000))).toBe(200);
    expect(cpuPercent(undefined, usage(2_000, 1))).toBeUndefined();
    // A recreated sandbox starts its counter again: no negative percent.
    expect(cpuPercent(usage(1_000, 9e9), usage(2_000, 1e6))).toBeUndefined();
  });

  it('memory is counted as docker stats counts it: the droppable file cache is not use; an unlimited limit is none', () => {
    const u = usageOf({
      cpu_stats: { cpu_usage: { total_usage: 42 } },
      memory_stats: { usage: 10_000_000, limit: 9223372036854771712, stats: { total_inactive_file: 4_000_000 } },
      pids_stats: { current: 5, limit: 512 },
    }, 7);
    expect(u).toEqual({ sampledMs: 7, cpuNanos: 42, memoryBytes: 6_000_000, memoryLimitBytes: undefined, processes: 5, processLimit: 512 });
    expect(usageOf({ memory_stats: { usage: 1 } }, 7)).toBeUndefined();
  });

  it('formats bytes and durations for people', () => {
    expect([bytes(undefined), bytes(512), bytes(1536), bytes(512 << 20), bytes(3 * 2 ** 30)]).toEqual(['-', '512 B', '1.5 KiB', '512 MiB', '3.0 GiB']);
    expect([duration(5_000), duration(93_000), duration(2 * 3600_000 + 5 * 60_000), duration(3 * 86_400_000)]).toEqual(['5s', '1m33s', '2h05m', '3d0h']);
  });

  it('the busiest sandbox comes first', () => {
    const prev = usageByRow(engineFigures({ sandboxes: [sandbox('idle', usage(0, 0)), sandbox('busy', usage(0, 0))] }));
    const now = [sandbox('idle', usage(1_000, 1e6)), sandbox('busy', usage(1_000, 9e8)), sandbox('gone', undefined)];
    const rows = topRows(now, engineFigures({ sandboxes: now }), prev, 20_000);
    expect(rows.map((r) => [r.key, r.cpuPercent === undefined ? undefined : Math.round(r.cpuPercent)])).toEqual([['busy', 90], ['idle', 0], ['gone', undefined]]);
    expect(rows[0]).toMatchObject({ tenant: 'acme', openSessions: 1, idleMs: 10_000, memoryBytes: 1 << 20, processes: 3, pending: undefined });
    expect(rows[2]).toMatchObject({ key: 'gone', state: 'running', memoryBytes: undefined, pending: undefined });
  });
});

describe('berth top: one line per tenant against its limits', () => {
  it('shows what each tenant holds and may hold: sandboxes, memory limits and disk bounds', () => {
    const view = topView({
      sandboxes: [sandbox('session:a', usage(1_000, 0))],
      tenants: [
        { tenant: 'acme', usage: { sandboxes: 3, memoryMb: 6144, diskMb: 30_720 }, quota: { sandboxes: 50, memoryMb: 24_576, diskMb: 262_144 } },
        { tenant: 'globex', usage: { sandboxes: 1, memoryMb: 0, diskMb: 0 }, quota: { sandboxes: 50, memoryMb: 24_576, diskMb: 262_144 } },
      ],
    });
    const lines = renderFrame(view, wide()).split('\n');
    const header = lines.findIndex((l) => l.startsWith('TENANT ') && l.includes('SANDBOXES'));
    expect(header).toBeGreaterThan(0);
    expect(lines[header + 1]).toMatch(/^acme +3\/50 +6\.0 GiB \/ 24 GiB +30 GiB \/ 256 GiB$/);
    expect(lines[header + 2]).toMatch(/^globex +1\/50 +0 B \/ 24 GiB +0 B \/ 256 GiB$/);
  });
});

describe('berth top: what reaches the operator\'s terminal', () => {
  it('control characters, escape sequences and bidirectional overrides become ?; a newline keeps an entry on one line', () => {
    expect(terminalText('ls\x1b]0;owned\x07 -la')).toBe('ls?]0;owned? -la');
    expect(terminalText('a\x1b[2J\x9bb\x7f')).toBe('a?[2J?b?');
    expect(terminalText('echo \u202etxt.exe')).toBe('echo ?txt.exe');
    expect(terminalText('one\n  two')).toBe('one ↵ two');
  });

  it('a frame carries no escape byte from a key, a session or a command, and no line is wider than the terminal', () => {
    const view = topView({
      sandboxes: [sandbox('session:\x1b[31mred', usage(1_000, 0))],
      tenants: [{ tenant: 'acme\x1b[2J', usage: { sandboxes: 1, memoryMb: 2048, diskMb: 10_240 }, quota: { sandboxes: 50, memoryMb: 24_000, diskMb: 250_000 } }],
      recentCalls: [{
        timeMs: 0, tenant: 'acme', profile: 'default', user: null, session: 'x\x1b[2J', sandboxKey: 'k', kind: 'exec',
        command: `printf '\x1b]0;pwned\x07'; echo ${'long '.repeat(60)}`, exitCode: 0, durationMs: 3,
      }],
      recentJobs: [job({ session: 'y\x1b[2J', command: 'echo \x1b]0;pwned\x07' })],
    });
    const frame = renderFrame(view, { nowMs: 30_000, columns: 100, rows: undefined, intervalSeconds: 2 });
    const controls = [...frame].filter((ch) => ch !== '\n' && (ch.charCodeAt(0) < 0x20 || (ch.charCodeAt(0) >= 0x7f && ch.charCodeAt(0) <= 0x9f)));
    expect(controls).toEqual([]);
    expect(frame).toContain('session:?[31mred');
    expect(frame).toContain('acme?[2J');
    expect(frame).toContain('y?[2J');
    expect(frame).toContain('echo ?]0;pwned?');
    expect(Math.max(...frame.split('\n').map((l) => l.length))).toBeLessThanOrEqual(100);
    // The summary's parts drop from the end as they fit: here the key hint.
    expect(frame.split('\n')[0]).toBe('berth top  00:00:30 UTC  1 sandbox (1 running), 1 open session  measuring CPU…');
  });

  it('an empty installation says so', () => {
    const frame = renderFrame(topView(), wide());
    expect(frame).toContain('(no sandboxes)');
    expect(frame).toMatch(/\nJOBS\nTENANT +SESSION +JOB +STATUS +AGE +COMMAND\n\(none\)\n/);
    expect(frame).toContain('(none)');
    expect(frame).toContain('(none yet)');
  });
});

describe('berth top: fits the terminal', () => {
  const busy = [
    sandbox('session:a-rather-long-session-key-for-a-chat', usage(1_000, 5e8, 300 << 20), { tenant: 'acme-corp' }),
    sandbox('session:idle', usage(1_000, 0), { tenant: 'globex' }),
  ];
  const view = (): TopView => topView({ sandboxes: busy, previous: usageByRow(engineFigures({ sandboxes: busy.map((s) => ({ ...s, usage: usage(0, 0) })) })) });
  const headerAt = (columns: number): string[] => {
    const lines = renderFrame(view(), { nowMs: 20_000, columns, rows: undefined, intervalSeconds: 2 }).split('\n');
    expect(Math.max(...lines.map((l) => l.length))).toBeLessThanOrEqual(columns);
    return (lines.find((l) => l.includes('SANDBOX')) ?? '').split(/ +/);
  };

  it('columns drop by priority as the width shrinks: 100 shows all but the memory limit, 80 keeps memory, processes, idle and sessions, 60 the key, state, CPU, memory and tenant', () => {
    expect(headerAt(120)).toEqual(['TENANT', 'PROFILE', 'SANDBOX', 'BACKEND', 'STATE', 'CPU%', 'MEMORY', 'MEM', 'MAX', 'PIDS', 'IDLE', 'SESS']);
    expect(headerAt(100)).toEqual(['TENANT', 'PROFILE', 'SANDBOX', 'BACKEND', 'STATE', 'CPU%', 'MEMORY', 'PIDS', 'IDLE', 'SESS']);
    expect(headerAt(80)).toEqual(['TENANT', 'SANDBOX', 'STATE', 'CPU%', 'MEMORY', 'PIDS', 'IDLE', 'SESS']);
    expect(headerAt(60)).toEqual(['TENANT', 'SANDBOX', 'STATE', 'CPU%', 'MEMORY']);
    expect(headerAt(40)).toEqual(['SANDBOX', 'STATE', 'CPU%']);
    expect(headerAt(20)).toEqual(['SANDBOX']);
  });

  it('at 80 columns a row carries every kept figure, and the sandbox key takes the room left (cut with …)', () => {
    const lines = renderFrame(view(), { nowMs: 20_000, columns: 80, rows: undefined, intervalSeconds: 2 }).split('\n');
    const row = lines.find((l) => l.includes('session:a-rather')) as string;
    expect(row).toMatch(/^acme-corp +session:a-rather-long-s… running +50\.0 +300 MiB +3 +10s +1$/);
    expect(row.length).toBeLessThanOrEqual(80);
  });

  it('the first frame, before the engines answered: every sandbox from the store, its figures marked … (not -)', () => {
    const frame = renderFrame(topView({ sandboxes: busy, engines: false }), { nowMs: 20_000, columns: 80, rows: 24, intervalSeconds: 2 });
    const row = frame.split('\n').find((l) => l.includes('session:idle')) as string;
    expect(row).toMatch(/^globex +session:idle +… +… +… +… +10s +1$/);
    expect(frame.split('\n')[0]).toContain('reading the engines…');
    // One engine answer: memory and processes; CPU waits for the second sample.
    const once = renderFrame(topView({ sandboxes: busy }), { nowMs: 20_000, columns: 80, rows: 24, intervalSeconds: 2 });
    expect(once.split('\n').find((l) => l.includes('session:idle'))).toMatch(/^globex +session:idle +running +… +1\.0 MiB +3 +10s +1$/);
  });

  it('jobs are listed by session: id, status, age and the command cut to the width', () => {
    const jobs = [
      job({ id: 'job_c', session: 'chat-2', startedMs: 18_000, command: 'make test' }),
      job({ id: 'job_b', session: 'chat-1', startedMs: 17_000, status: 'exited', exitCode: 0, command: 'npm ci' }),
      job({ id: 'job_a', session: 'chat-2', startedMs: 5_000, status: 'killed', command: `sleep 300; ${'x'.repeat(100)}` }),
    ];
    const lines = renderFrame(topView({ recentJobs: jobs }), { nowMs: 20_000, columns: 80, rows: undefined, intervalSeconds: 2 }).split('\n');
    const at = lines.indexOf('JOBS');
    expect(lines[at + 1]).toMatch(/^TENANT +SESSION +JOB +STATUS +AGE +COMMAND$/);
    expect(lines.slice(at + 2, at + 5).map((l) => l.split(/ +/).slice(1, 5))).toEqual([
      ['chat-2', 'job_c', 'running', '2s'], ['chat-2', 'job_a', 'killed', '15s'], ['chat-1', 'job_b', 'exited', '0'],
    ]);
    expect(lines[at + 3]).toMatch(/sleep 300; x+…$/);
    expect(lines[at + 3]).toHaveLength(80);
  });

  it('a frame never has more lines than the terminal: sections are cut with "… N more", the sandboxes last', () => {
    const many = Array.from({ length: 30 }, (_, i) => sandbox(`session:s${i}`, usage(1_000, 0)));
    const calls = Array.from({ length: 10 }, (_, i) => ({
      timeMs: i, tenant: 'acme', profile: 'default', user: null, session: `s${i}`, sandboxKey: 'k', kind: 'exec', command: `echo ${i}`, exitCode: 0, durationMs: 1,
    }));
    const jobs = Array.from({ length: 8 }, (_, i) => job({ id: `job_${i}` }));
    const lines = renderFrame(topView({ sandboxes: many, recentCalls: calls, recentJobs: jobs }), { nowMs: 20_000, columns: 80, rows: 24, intervalSeconds: 2 }).split('\n');
    // As tall as the terminal: the last line ends without a newline, so nothing scrolls.
    expect(lines).toHaveLength(24);
    expect(lines.filter((l) => l.startsWith('… '))).toEqual(['… 21 more sandboxes', '… 6 more jobs', '… 8 more calls']);
    expect(lines).toContain('JOBS');
    expect(lines).toContain('RECENT CALLS');
  });
});
