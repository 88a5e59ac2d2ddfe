import type { ServerResponse } from 'node:http';
import type { Broker } from '../broker/broker.js';
import type { Logger } from '../logging/logger.js';
import type { Caller } from './caller.js';
import type { CallHistory } from './call-history.js';
import { HttpError, toHttpError } from './http-error.js';
import { overviewView } from './overview-view.js';
import { SseStream } from './sse.js';
import { UsageSamples } from './usage-samples.js';

/*
 * `GET /v1/overview/stream`: the dashboard's live view as server-sent events. Each connected
 * stream has at most one timer: the next update is due `intervalMs` after the last one (engine
 * stats are read then), or `soonMs` after one of its tenant's calls ended, whichever is first;
 * after an update whose CPU figures waited for a second sample, `minGapMs` after it. The streams
 * share their samples, so a new stream has CPU at once wherever another read left one.
 * An update is built only when the client has taken the previous one (a stalled reader holds
 * one update of memory, not a queue of them). The timer goes with the client.
 */

/** Updates when nothing happens: each reads the engines' stats. */
const OVERVIEW_INTERVAL_MS = 5_000;
/** After a call of the tenant ended, the next update is this soon. */
const SOON_MS = 250;
/** Streams one tenant may hold open at once (each reads the engines every interval). */
export const MAX_STREAMS_PER_TENANT = 8;
/** At least this long from one update's start to the next: a busy tenant's calls do not turn into engine reads each. */
const MIN_GAP_MS = 1_000;

export interface OverviewStreamOptions {
  intervalMs?: number;
  soonMs?: number;
  minGapMs?: number;
  /** Samples the open sessions into the history (throttled by its owner). */
  sampleSessions?: () => void;
  /** Where an update that failed unexpectedly is logged, at error with its stack (the client gets a generic message). */
  log?: Logger;
}

/**
 * The open overview streams of one server: `serve` one per request, `notify` them of a call that
 * ended, `closeAll` at shutdown. `open` and `timers` count what is live (tests check a client
 * that went away leaves neither).
 */
export class OverviewStreams {
  private readonly watchers = new Set<Watcher>();
  private readonly samples = new UsageSamples();
  private readonly intervalMs: number;
  private readonly soonMs: number;
  private readonly minGapMs: number;

  constructor(private readonly broker: Broker, private readonly history: CallHistory, private readonly opts: OverviewStreamOptions = {}) {
    this.intervalMs = opts.intervalMs ?? OVERVIEW_INTERVAL_MS;
    this.soonMs = opts.soonMs ?? SOON_MS;
    this.minGapMs = opts.minGapMs ?? MIN_GAP_MS;
  }

  /** Streams open now. */
  get open(): number {
    return this.watchers.size;
  }

  /** Timers pending now (at most one per open stream). */
  get timers(): number {
    let n = 0;
    for (const w of this.watchers) if (w.timerPending) n++;
    return n;
  }

  /** A call of `tenant` in `profile` ended: its streams that may see that profile update soon. */
  notify(tenant: string, profile: string | undefined): void {
    for (const w of this.watchers) {
      if (w.caller.tenant === tenant && (profile === undefined || w.caller.profiles.includes(profile))) w.schedule(this.soonMs);
    }
  }

  /**
   * Answers one stream until the client goes away or `closeAll`: an `overview` event at once,
   * then one per update (an `error` event when one could not be built; the next may succeed).
   * `stillAllowed` is asked before each update: a token revoked (or changed) since the stream
   * opened ends it with an `error` event (`unauthorized`), as its next request would be refused.
   *
   * @throws HttpError too_many_calls when the tenant already holds MAX_STREAMS_PER_TENANT.
   */
  async serve(res: ServerResponse, caller: Caller, stillAllowed: () => boolean): Promise<void> {
    const mine = [...this.watchers].filter((w) => w.caller.tenant === caller.tenant).length;
    if (mine >= MAX_STREAMS_PER_TENANT) {
      throw new HttpError('too_many_calls', `this tenant already has ${MAX_STREAMS_PER_TENANT} overview streams open; close a dashboard tab and retry`, { 'retry-after': '5' });
    }
    res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-store', 'x-accel-buffering': 'no' });
    res.flushHeaders();
    const closed = new Promise<void>((resolve) => (res.closed ? resolve() : res.once('close', () => resolve())));
    const w: Watcher = new Watcher(caller, new SseStream(res), { intervalMs: this.intervalMs, minGapMs: this.minGapMs }, (): Promise<boolean> => this.update(w, stillAllowed));
    this.watchers.add(w);
    void closed.then(() => {
      w.stop();
      this.watchers.delete(w);
    });
    w.schedule(0);
    await closed;
  }

  /** Ends every stream (server shutdown): their timers stop, their responses end. */
  closeAll(): void {
    for (const w of this.watchers) {
      w.stop();
      void w.events.end();
    }
  }

  /** One update of `w`; true when a figure waits for the next sample (the next update comes soon). */
  private async update(w: Watcher, stillAllowed: () => boolean): Promise<boolean> {
    if (!stillAllowed()) {
      w.stop();
      w.events.send('error', { error: { code: 'unauthorized', message: 'the token was revoked or changed; log in again' } });
      await w.events.end();
      return false;
    }
    this.opts.sampleSessions?.();
    try {
      const view = await overviewView(this.broker, this.history, w.caller, this.samples);
      w.events.send('overview', view);
      return view.sandboxes.some((s) => s.usage?.cpuPending === true);
    } catch (err) {
      const e = toHttpError(err);
      if (e.code === 'internal') this.opts.log?.error(`overview update for tenant ${w.caller.tenant}: ${String(err)}`, { stack: err instanceof Error ? err.stack : undefined });
      w.events.send('error', { error: { code: e.code, message: e.message } });
      return false;
    }
  }
}

/** One stream: its caller and its one timer. */
class Watcher {
  private timer: NodeJS.Timeout | undefined;
  private dueMs = Number.POSITIVE_INFINITY;
  private lastStartMs = Number.NEGATIVE_INFINITY;
  private running = false;
  private again = false;
  private stopped = false;

  constructor(
    readonly caller: Caller, readonly events: SseStream, private readonly pace: { intervalMs: number; minGapMs: number },
    /** Builds and sends one update; true when the next should come soon. */
    private readonly build: () => Promise<boolean>,
  ) {}

  get timerPending(): boolean {
    return this.timer !== undefined;
  }

  /** The next update in `delayMs` (no sooner than `minGapMs` after the last one began), unless one is due sooner; replaces the pending timer. */
  schedule(delayMs: number): void {
    if (this.stopped) return;
    const now = Date.now();
    const due = Math.max(now + delayMs, this.lastStartMs + this.pace.minGapMs);
    if (this.timer !== undefined && due >= this.dueMs) return;
    clearTimeout(this.timer);
    this.dueMs = due;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.dueMs = Number.POSITIVE_INFINITY;
      void this.tick();
    }, due - now);
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
    this.timer = undefined;
  }

  private async tick(): Promise<void> {
    if (this.running) {
      this.again = true;
      return;
    }
    this.running = true;
    this.lastStartMs = Date.now();
    let soon = false;
    try {
      // The client has not taken the previous update yet: skip this one, not queue it.
      if (!this.events.gone && !this.events.congested) soon = await this.build();
    } finally {
      this.running = false;
      // `soon`: the minimum gap applies (schedule never goes under it).
      const next = this.again || soon ? 0 : this.pace.intervalMs;
      this.again = false;
      this.schedule(next);
    }
  }
}
