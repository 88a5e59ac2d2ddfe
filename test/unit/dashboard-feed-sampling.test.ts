import { afterEach, describe, expect, it, vi } from 'vitest';
import type { Broker } from '../../src/broker/broker.js';
import { MINUTE_MS } from '../../src/server/call-history.js';
import { DashboardFeed } from '../../src/server/dashboard-feed.js';

describe('the dashboard feed samples the open sessions', () => {
  afterEach(() => vi.useRealTimers());

  it('at most every few seconds, but always at the first update of a new minute (no minute shows calls without sessions)', () => {
    vi.useFakeTimers();
    const start = Math.floor(Date.UTC(2026, 11, 1, 12, 0) / MINUTE_MS) * MINUTE_MS;
    vi.setSystemTime(start + 58_000);
    let open = 2;
    const broker = { observe: () => () => undefined, openSessionCounts: () => [{ tenant: 'a', profile: 'default', open }] } as unknown as Broker;
    const feed = new DashboardFeed(broker, () => undefined);
    feed.start();
    expect(feed.history.lastHour('a', ['default']).at(-1)?.sessions).toBe(2);
    // 3 s later, in the next minute: an update samples although the last sample is that recent.
    open = 3;
    vi.setSystemTime(start + 61_000);
    feed['sample'](false);
    expect(feed.history.lastHour('a', ['default']).at(-1)?.sessions).toBe(3);
    // 1 s later, same minute: throttled.
    open = 5;
    vi.setSystemTime(start + 62_000);
    feed['sample'](false);
    expect(feed.history.lastHour('a', ['default']).at(-1)?.sessions).toBe(3);
    feed.close();
  });
});
