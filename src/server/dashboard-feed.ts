import type { Broker } from '../broker/broker.js';
import type { Logger } from '../logging/logger.js';
import { CallHistory, MINUTE_MS } from './call-history.js';
import { OverviewStreams, type OverviewStreamOptions } from './overview-stream.js';

/**
 * What feeds the live dashboard of one server: the last hour (`CallHistory`, fed by the broker's
 * calls and by samples of the open sessions, one a minute and on streams' updates) and the open
 * overview streams (told of each call that ended and each egress decision, so the page updates
 * at once; a stream's own pacing bounds how often). One timer: the
 * minute sampler, stopped by `close`.
 *
 * @example
 * const feed = new DashboardFeed(broker, logger.child('berth:server'));
 * feed.start();
 * await feed.streams.serve(res, caller);
 * feed.close();
 */
export class DashboardFeed {
  readonly history = new CallHistory();
  readonly streams: OverviewStreams;
  private timer: NodeJS.Timeout | undefined;
  private stopObserving: (() => void) | undefined;

  constructor(private readonly broker: Broker, private readonly log: Logger, opts: OverviewStreamOptions = {}) {
    this.streams = new OverviewStreams(broker, this.history, { log, ...opts, sampleSessions: () => this.sample() });
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
      egress: (e) => this.streams.notify(e.identity.tenant, e.identity.profile),
    });
    this.sample();
    this.timer = setInterval(() => this.sample(), MINUTE_MS);
    this.timer.unref();
  }

  close(): void {
    clearInterval(this.timer);
    this.timer = undefined;
    this.streams.closeAll();
    this.stopObserving?.();
    this.stopObserving = undefined;
  }

  /**
   * Samples the open sessions: each minute, and at every stream update (updates are at least a
   * second apart per stream), so an update pushed by a call shows the sessions that call opened.
   */
  private sample(): void {
    const now = Date.now();
    try {
      this.history.sessionsOpen(this.broker.openSessionCounts(), now);
    } catch (err) {
      this.log.warn(`sampling the open sessions failed: ${err instanceof Error ? err.message : String(err)}`);
    }
  }
}
