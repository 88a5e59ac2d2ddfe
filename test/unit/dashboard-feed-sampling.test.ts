import { afterEach, describe, expect, it, vi } from 'vitest';
import type { Broker } from '../../src/broker/broker.js';
import { MINUTE_MS } from '../../src/server/call-history.js';
import { Logger } from '../../src/logging/logger.js';
import { DashboardFeed } from '../../src/server/dashboard-feed.js';

describe('the dashboard feed samples the open sessions', () => {
  afterEach(() => vi.useRealTimers());

  it('at every update, so an update pushed by a call shows the sessions it opened; a minute keeps the most it saw', () => {
    vi.useFakeTimers();
    const start = Math.floor(Date.UTC(2026, 11, 1, 12, 0) / MINUTE_MS) * MINUTE_MS;
    vi.setSystemTime(start + 58_000);
    let open = 2;
    const broker = { observe: () => () => undefined, openSessionCounts: () => [{ tenant: 'a', profile: 'default', open }] } as unknown as Broker;
    const feed = new DashboardFeed(broker, Logger.silent());
    feed.start();
    expect(feed.history.lastHour('a', ['default']).at(-1)?.sessions).toBe(2);
    // 1 s later, same minute: a session opened, and the next update shows it.
    open = 3;
    vi.setSystemTime(start + 59_000);
    feed['sample']();
    expect(feed.history.lastHour('a', ['default']).at(-1)?.sessions).toBe(3);
    // The next minute starts from what it sees.
    open = 1;
    vi.setSystemTime(start + 61_000);
    feed['sample']();
    expect(feed.history.lastHour('a', ['default']).slice(-2).map((p) => p.sessions)).toEqual([3, 1]);
    feed.close();
  });
});
