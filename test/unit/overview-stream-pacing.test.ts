import { EventEmitter } from 'node:events';
import type { ServerResponse } from 'node:http';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { Broker } from '../../src/broker/broker.js';
import { Logger, type LogRecord } from '../../src/logging/logger.js';
import { CallHistory } from '../../src/server/call-history.js';
import { OverviewStreams } from '../../src/server/overview-stream.js';

/*
 * How often an overview stream updates, on a fake clock: at once, then every interval, sooner
 * after its tenant's call (never another tenant's), never closer than the minimum gap, and with
 * one timer at most however many calls end; nothing is left once the client went away.
 */

/** A response that takes every write at once. */
class FakeResponse extends EventEmitter {
  readonly chunks: string[] = [];
  closed = false;
  destroyed = false;
  writableEnded = false;
  writableNeedDrain = false;
  writeHead(): this {
    return this;
  }
  flushHeaders(): void {}
  write(text: string): boolean {
    this.chunks.push(text);
    return true;
  }
  end(): void {
    this.writableEnded = true;
    this.hangUp();
  }
  hangUp(): void {
    this.closed = true;
    this.emit('close');
  }
  get updates(): number {
    return this.chunks.filter((c) => c.startsWith('event: overview')).length;
  }
}

function brokerStub(): { broker: Broker; builds: () => number } {
  let builds = 0;
  const broker = {
    overview: async () => {
      builds++;
      return { sandboxes: [], recentCalls: [] };
    },
    jobs: { ofTenant: async () => [] },
    audit: () => [],
    egressAudit: () => [],
  } as unknown as Broker;
  return { broker, builds: () => builds };
}

const acme = { tenant: 'acme', profiles: ['default'] };

describe('overview stream pacing', () => {
  beforeEach(() => {
    vi.useFakeTimers({ now: 1_000_000 });
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it('at once, then every interval; a call of its tenant brings one sooner, no closer than the gap; one timer at most', async () => {
    const { broker } = brokerStub();
    const streams = new OverviewStreams(broker, new CallHistory(), { intervalMs: 10_000, soonMs: 100, minGapMs: 1_000 });
    const res = new FakeResponse();
    const served = streams.serve(res as unknown as ServerResponse, acme, () => true);
    await vi.advanceTimersByTimeAsync(0);
    expect(res.updates).toBe(1);
    expect(streams.timers).toBe(1);

    await vi.advanceTimersByTimeAsync(9_999);
    expect(res.updates).toBe(1);
    await vi.advanceTimersByTimeAsync(1);
    expect(res.updates).toBe(2);

    // Many calls end at once (well after the last update): one timer, one update, 100 ms later.
    await vi.advanceTimersByTimeAsync(2_000);
    for (let i = 0; i < 50; i++) streams.notify('acme', 'default');
    expect(streams.timers).toBe(1);
    await vi.advanceTimersByTimeAsync(100);
    expect(res.updates).toBe(3);
    // Right after an update, a call waits for the gap (1 s from that update's start), not 100 ms.
    streams.notify('acme', 'default');
    await vi.advanceTimersByTimeAsync(999);
    expect(res.updates).toBe(3);
    await vi.advanceTimersByTimeAsync(1);
    expect(res.updates).toBe(4);

    // Another tenant's call, or a profile the token does not have, brings nothing.
    streams.notify('beta', 'default');
    streams.notify('acme', 'bot');
    await vi.advanceTimersByTimeAsync(5_000);
    expect(res.updates).toBe(4);

    res.hangUp();
    await served;
    expect([streams.open, streams.timers]).toEqual([0, 0]);
    await vi.advanceTimersByTimeAsync(60_000);
    expect(res.updates).toBe(4);
  });

  it('a client that has not taken the last update is skipped, not queued', async () => {
    const { broker, builds } = brokerStub();
    const streams = new OverviewStreams(broker, new CallHistory(), { intervalMs: 1_000, minGapMs: 0 });
    const res = new FakeResponse();
    const served = streams.serve(res as unknown as ServerResponse, acme, () => true);
    await vi.advanceTimersByTimeAsync(0);
    expect(res.updates).toBe(1);
    res.writableNeedDrain = true;
    await vi.advanceTimersByTimeAsync(5_000);
    expect([res.updates, builds()]).toEqual([1, 1]);
    res.writableNeedDrain = false;
    await vi.advanceTimersByTimeAsync(1_000);
    expect(res.updates).toBe(2);
    res.hangUp();
    await served;
  });

  it('an update that fails with berth\'s own bug is one error line with its stack; the client gets a generic error', async () => {
    const broker = { overview: async () => { throw new Error('overview broke'); }, jobs: { ofTenant: async () => [] }, audit: () => [], egressAudit: () => [] } as unknown as Broker;
    const records: LogRecord[] = [];
    const log = new Logger((_ns, _m, r) => void (r !== undefined && records.push(r)), 'berth:server');
    const streams = new OverviewStreams(broker, new CallHistory(), { intervalMs: 10_000, log });
    const res = new FakeResponse();
    const served = streams.serve(res as unknown as ServerResponse, acme, () => true);
    await vi.advanceTimersByTimeAsync(0);
    expect(records).toHaveLength(1);
    expect(records[0]).toMatchObject({ level: 'error', msg: 'overview update for tenant acme: Error: overview broke' });
    expect(String(records[0]?.fields?.['stack'])).toMatch(/overview broke\n\s+at /);
    expect(res.chunks.join('')).toContain('event: error');
    expect(res.chunks.join('')).not.toContain('overview broke');
    res.hangUp();
    await served;
  });
});
