import { describe, expect, it } from 'vitest';
import type { SandboxUsage } from '../../src/backends/backend.js';
import { usageOf } from '../../src/backends/docker/usage.js';
import type { Overview } from '../../src/broker/broker-types.js';
import { terminalText } from '../../src/cli/terminal-text.js';
import { cpuPercent } from '../../src/broker/sandbox-usage.js';
import { bytes, duration, renderFrame, topRows, usageByRow } from '../../src/cli/top/render.js';

const usage = (sampledMs: number, cpuNanos: number, memoryBytes = 1 << 20): SandboxUsage => ({
  sampledMs, cpuNanos, memoryBytes, memoryLimitBytes: 512 << 20, processes: 3, processLimit: 256,
});

function sandbox(key: string, u: SandboxUsage | undefined, extra: Partial<Overview['sandboxes'][number]> = {}): Overview['sandboxes'][number] {
  return {
    sandboxKey: key, tenant: 'acme', profile: 'default', backend: 'docker', rule: 'session', persistent: false, name: key,
    mount: null, createdMs: 0, lastUsedMs: 10_000, sessions: [{ session: 's', open: true }], state: 'running', usage: u, ...extra,
  };
}

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
    const prev = usageByRow({ sandboxes: [sandbox('idle', usage(0, 0)), sandbox('busy', usage(0, 0))], tenants: [], recentCalls: [] });
    const rows = topRows({ sandboxes: [sandbox('idle', usage(1_000, 1e6)), sandbox('busy', usage(1_000, 9e8)), sandbox('gone', undefined)], tenants: [], recentCalls: [] }, prev, 20_000);
    expect(rows.map((r) => [r.key, r.cpuPercent === undefined ? undefined : Math.round(r.cpuPercent)])).toEqual([['busy', 90], ['idle', 0], ['gone', undefined]]);
    expect(rows[0]).toMatchObject({ tenant: 'acme', openSessions: 1, idleMs: 10_000, memoryBytes: 1 << 20, processes: 3 });
  });
});

describe('berth top: one line per tenant against its limits', () => {
  it('shows what each tenant holds and may hold: sandboxes, memory limits and disk bounds', () => {
    const view: Overview = {
      sandboxes: [sandbox('session:a', usage(1_000, 0))],
      tenants: [
        { tenant: 'acme', usage: { sandboxes: 3, memoryMb: 6144, diskMb: 30_720 }, quota: { sandboxes: 50, memoryMb: 24_576, diskMb: 262_144 } },
        { tenant: 'globex', usage: { sandboxes: 1, memoryMb: 0, diskMb: 0 }, quota: { sandboxes: 50, memoryMb: 24_576, diskMb: 262_144 } },
      ],
      recentCalls: [],
    };
    const lines = renderFrame(view, new Map(), { nowMs: 0, columns: 200, intervalSeconds: undefined }).split('\n');
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
    const view: Overview = {
      sandboxes: [sandbox('session:\x1b[31mred', usage(1_000, 0))],
      tenants: [{ tenant: 'acme\x1b[2J', usage: { sandboxes: 1, memoryMb: 2048, diskMb: 10_240 }, quota: { sandboxes: 50, memoryMb: 24_000, diskMb: 250_000 } }],
      recentCalls: [{
        timeMs: 0, tenant: 'acme', profile: 'default', user: null, session: 'x\x1b[2J', sandboxKey: 'k', kind: 'exec',
        command: `printf '\x1b]0;pwned\x07'; echo ${'long '.repeat(60)}`, exitCode: 0, durationMs: 3,
      }],
    };
    const frame = renderFrame(view, new Map(), { nowMs: 30_000, columns: 100, intervalSeconds: 2 });
    const controls = [...frame].filter((ch) => ch !== '\n' && (ch.charCodeAt(0) < 0x20 || (ch.charCodeAt(0) >= 0x7f && ch.charCodeAt(0) <= 0x9f)));
    expect(controls).toEqual([]);
    expect(frame).toContain('session:?[31mred');
    expect(frame).toContain('acme?[2J');
    expect(Math.max(...frame.split('\n').map((l) => l.length))).toBeLessThanOrEqual(100);
    expect(frame.split('\n')[0]).toBe('berth top  00:00:30 UTC  1 sandbox (1 running), 1 open session  every 2s, Ctrl-C quits');
  });

  it('an empty installation says so', () => {
    const frame = renderFrame({ sandboxes: [], tenants: [], recentCalls: [] }, new Map(), { nowMs: 0, columns: 200, intervalSeconds: undefined });
    expect(frame).toContain('(no sandboxes)');
    expect(frame).toContain('(none yet)');
  });
});
