import type { Broker } from '../broker/broker.js';
import { CallHistory, MINUTE_MS } from './call-history.js';
import { OverviewStreams, type OverviewStreamOptions } from './overview-stream.js';

/** Open sessions are sampled at most this often (a stream's update asks; the minute timer always does). */
export const SESSION_SAMPLE_MS = 5_000;

/**
 * What feeds the live dashboard of one server: the last hour (`CallHistory`, fed by the broker's
 * calls and by samples of the open sessions, one a minute and on streams' updates) and the open
 * overview streams (told of each call that ended, so the page updates at once). One timer: the
 * minute sampler, stopped by `close`.
 *
 * @example
 * const feed = new DashboardFeed(broker, log);
 * feed.start();
 * await feed.streams.serve(res, caller);
 * feed.close();
 */
export class DashboardFeed {
  readonly history = new CallHistory();
  readonly streams: OverviewStreams;
  private timer: NodeJS.Timeout | undefined;
  private stopObserving: (() => void) | undefined;
  private lastSampleMs = Number.NEGATIVE_INFINITY;

  constructor(private readonly broker: Broker, private readonly log: (message: string) => void, opts: OverviewStreamOptions = {}) {
    this.streams = new OverviewStreams(broker, this.history, { log, ...opts, sampleSessions: () => this.sample(false) });
  }

  start(): void {
    this.stopObserving = this.broker.observe({
      callEnded: (o) => {
        this.history.callEnded(o);
        this.streams.notify(o.tenant, o.profile);
      },
      refused: () => undefined,
      reaped: (o) => {
        if (o.tenant !== undefined) this.streams.notify(o.tenant, undefined);
      },
    });
    this.sample(true);
    this.timer = setInterval(() => this.sample(true), MINUTE_MS);
    this.timer.unref();
  }

  close(): void {
    clearInterval(this.timer);
    this.timer = undefined;
    this.streams.closeAll();
    this.stopObserving?.();
    this.stopObserving = undefined;
  }

  private sample(always: boolean): void {
    const now = Date.now();
    // At most one sample per SESSION_SAMPLE_MS, but the first update of a new minute always samples:
    // else that minute could show its calls with no session count.
    const sameMinute = Math.floor(now / MINUTE_MS) === Math.floor(this.lastSampleMs / MINUTE_MS);
    if (!always && sameMinute && now - this.lastSampleMs < SESSION_SAMPLE_MS) return;
    this.lastSampleMs = now;
    try {
      this.history.sessionsOpen(this.broker.openSessionCounts(), now);
    } catch (err) {
      this.log(`sampling the open sessions failed: ${err instanceof Error ? err.message : String(err)}`);
    }
  }
}
