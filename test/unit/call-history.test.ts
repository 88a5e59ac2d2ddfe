import { describe, expect, it } from 'vitest';
import type { CallObservation } from '../../src/broker/observer.js';
import { CallHistory, MAX_SERIES, MINUTE_MS, MINUTES, SAMPLES_PER_MINUTE } from '../../src/server/call-history.js';

const T0 = 1_000 * MINUTE_MS;

function exec(tenant: string, profile: string, durationMs: number, extra: Partial<CallObservation> = {}): CallObservation {
  return { kind: 'exec', tenant, profile, backend: 'docker', durationMs, cold: false, timedOut: false, errorCode: undefined, ...extra };
}

describe('CallHistory: the dashboard\'s last hour', () => {
  it('60 one-minute points, oldest first; the median of each minute\'s exec calls (failed calls and other kinds left out)', () => {
    const h = new CallHistory();
    for (const ms of [10, 30, 20]) h.callEnded(exec('acme', 'default', ms), T0 + 5_000);
    for (const ms of [100, 300]) h.callEnded(exec('acme', 'default', ms), T0 + MINUTE_MS + 1);
    h.callEnded(exec('acme', 'default', 9_999, { errorCode: 'timeout' }), T0 + MINUTE_MS + 2);
    h.callEnded({ ...exec('acme', 'default', 9_999), kind: 'job' }, T0 + MINUTE_MS + 3);
    const points = h.lastHour('acme', ['default'], T0 + MINUTE_MS + 10);
    expect(points).toHaveLength(MINUTES);
    expect(points.at(-1)).toEqual({ minuteMs: T0 + MINUTE_MS, execCalls: 2, p50Ms: 200, sessions: null });
    expect(points.at(-2)).toEqual({ minuteMs: T0, execCalls: 3, p50Ms: 20, sessions: null });
    expect(points[0]).toEqual({ minuteMs: T0 - 58 * MINUTE_MS, execCalls: 0, p50Ms: null, sessions: null });
  });

  it('a tenant sees its own calls, of its own profiles, summed across them', () => {
    const h = new CallHistory();
    h.callEnded(exec('acme', 'default', 10), T0);
    h.callEnded(exec('acme', 'bot', 50), T0);
    h.callEnded(exec('beta', 'default', 1_000), T0);
    h.sessionsOpen([{ tenant: 'acme', profile: 'default', open: 2 }, { tenant: 'acme', profile: 'bot', open: 1 }, { tenant: 'beta', profile: 'default', open: 7 }], T0);
    expect(h.lastHour('acme', ['default'], T0).at(-1)).toMatchObject({ execCalls: 1, p50Ms: 10, sessions: 2 });
    expect(h.lastHour('acme', ['bot'], T0).at(-1)).toMatchObject({ execCalls: 1, p50Ms: 50, sessions: 1 });
    expect(h.lastHour('acme', ['default', 'bot'], T0).at(-1)).toMatchObject({ execCalls: 2, p50Ms: 30, sessions: 3 });
    expect(h.lastHour('beta', ['default'], T0).at(-1)).toMatchObject({ execCalls: 1, p50Ms: 1_000, sessions: 7 });
    expect(h.lastHour('gamma', ['default'], T0).every((p) => p.execCalls === 0 && p.sessions === null)).toBe(true);
  });

  it('open sessions: the most seen in a minute; a known series missing from a sample had none open', () => {
    const h = new CallHistory();
    h.sessionsOpen([{ tenant: 'acme', profile: 'default', open: 3 }], T0);
    h.sessionsOpen([{ tenant: 'acme', profile: 'default', open: 1 }], T0 + 1_000);
    h.sessionsOpen([], T0 + MINUTE_MS);
    const points = h.lastHour('acme', ['default'], T0 + MINUTE_MS);
    expect(points.slice(-2).map((p) => p.sessions)).toEqual([3, 0]);
  });

  it('bounded: minutes older than an hour go, a minute keeps at most SAMPLES_PER_MINUTE latencies, at most MAX_SERIES series', () => {
    const h = new CallHistory(() => 0.999_999);
    h.callEnded(exec('acme', 'default', 5), T0);
    h.callEnded(exec('acme', 'default', 7), T0 + MINUTES * MINUTE_MS);
    const later = h.lastHour('acme', ['default'], T0 + MINUTES * MINUTE_MS);
    expect(later.reduce((n, p) => n + p.execCalls, 0)).toBe(1);
    const ring = (h as unknown as { series: Map<string, { samples: number[] }[]> }).series;
    expect([...ring.values()][0]).toHaveLength(1);

    for (let i = 0; i < SAMPLES_PER_MINUTE * 3; i++) h.callEnded(exec('acme', 'bot', i < SAMPLES_PER_MINUTE ? 1 : 1_000), T0);
    const bot = h.lastHour('acme', ['bot'], T0).at(-1);
    expect(bot?.execCalls).toBe(SAMPLES_PER_MINUTE * 3);
    expect(ring.get(JSON.stringify(['acme', 'bot']))?.[0]?.samples).toHaveLength(SAMPLES_PER_MINUTE);

    for (let i = 0; i < MAX_SERIES + 10; i++) h.callEnded(exec(`t${i}`, 'default', 1), T0);
    expect(ring.size).toBe(MAX_SERIES);
    // The least recently fed went first.
    expect(ring.has(JSON.stringify(['acme', 'default']))).toBe(false);
    expect(ring.has(JSON.stringify([`t${MAX_SERIES + 9}`, 'default']))).toBe(true);
  });
});
