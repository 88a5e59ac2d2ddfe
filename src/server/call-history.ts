import type { CallObservation } from '../broker/observer.js';

/*
 * The last hour of a server, for the dashboard's charts: exec latency (p50 per minute) and open
 * sessions, per tenant and profile so that a token sees only its own profiles' calls. Bounded:
 * 60 one-minute buckets per tenant and profile (older minutes are dropped as new ones begin),
 * each holding at most SAMPLES_PER_MINUTE latencies (a reservoir sample past that), and at most
 * MAX_SERIES series (tenant and profile pairs; the least recently fed goes first). Nothing here
 * names a session, a user or a command.
 */

export const MINUTES = 60;
export const MINUTE_MS = 60_000;
export const SAMPLES_PER_MINUTE = 512;
export const MAX_SERIES = 1024;

interface Bucket {
  minute: number;
  /** Exec calls that ended in this minute. */
  count: number;
  /** A uniform sample of their durations (ms). */
  samples: number[];
  /** The most sessions seen open in this minute, or undefined when none was sampled. */
  sessions: number | undefined;
}

/** One minute of the chart: its start, the exec calls, their median latency and the open sessions (null: not known). */
export interface HistoryPoint {
  minuteMs: number;
  execCalls: number;
  p50Ms: number | null;
  sessions: number | null;
}

/**
 * The ring of one server. Feed it `callEnded` (as a broker observer) and `sessionsOpen` (a
 * sample of the open sessions); read a tenant's last hour with `lastHour`.
 *
 * @example
 * const history = new CallHistory();
 * history.callEnded(observation);
 * history.lastHour('acme', ['default'], Date.now()); // 60 points, oldest first
 */
export class CallHistory {
  private readonly series = new Map<string, Bucket[]>();

  constructor(private readonly random: () => number = Math.random) {}

  callEnded(o: CallObservation, nowMs = Date.now()): void {
    if (o.kind !== 'exec' || o.errorCode !== undefined) return;
    const b = this.bucket(o.tenant, o.profile, nowMs);
    b.count++;
    if (b.samples.length < SAMPLES_PER_MINUTE) {
      b.samples.push(o.durationMs);
      return;
    }
    // Reservoir sampling: every call of the minute has the same chance to be in the sample.
    const i = Math.floor(this.random() * b.count);
    if (i < SAMPLES_PER_MINUTE) b.samples[i] = o.durationMs;
  }

  /**
   * A sample of the open sessions now, by tenant and profile; a series it does not name has none
   * open. A minute keeps the most it saw.
   */
  sessionsOpen(counts: ReadonlyArray<{ tenant: string; profile: string; open: number }>, nowMs = Date.now()): void {
    const zero = new Set(this.series.keys());
    for (const c of counts) {
      zero.delete(keyOf(c.tenant, c.profile));
      const b = this.bucket(c.tenant, c.profile, nowMs);
      b.sessions = Math.max(b.sessions ?? 0, c.open);
    }
    for (const key of zero) {
      const [tenant, profile] = JSON.parse(key) as [string, string];
      const b = this.bucket(tenant, profile, nowMs);
      b.sessions ??= 0;
    }
  }

  /** The 60 minutes up to `nowMs`, oldest first, of the tenant's `profiles` together. */
  lastHour(tenant: string, profiles: readonly string[], nowMs = Date.now()): HistoryPoint[] {
    const last = Math.floor(nowMs / MINUTE_MS);
    const mine = profiles.map((p) => this.series.get(keyOf(tenant, p))).filter((s) => s !== undefined);
    const points: HistoryPoint[] = [];
    for (let minute = last - MINUTES + 1; minute <= last; minute++) {
      const buckets = mine.map((s) => s.find((b) => b.minute === minute)).filter((b) => b !== undefined);
      const samples = buckets.flatMap((b) => b.samples);
      const sessions = buckets.filter((b) => b.sessions !== undefined);
      points.push({
        minuteMs: minute * MINUTE_MS,
        execCalls: buckets.reduce((n, b) => n + b.count, 0),
        p50Ms: samples.length === 0 ? null : median(samples),
        sessions: sessions.length === 0 ? null : sessions.reduce((n, b) => n + (b.sessions ?? 0), 0),
      });
    }
    return points;
  }

  private bucket(tenant: string, profile: string, nowMs: number): Bucket {
    const key = keyOf(tenant, profile);
    const minute = Math.floor(nowMs / MINUTE_MS);
    let ring = this.series.get(key);
    if (ring === undefined) {
      ring = [];
      if (this.series.size >= MAX_SERIES) this.series.delete(this.series.keys().next().value as string);
    }
    // Re-inserted: the map's order is the order series were last fed.
    this.series.delete(key);
    this.series.set(key, ring);
    let b = ring.find((x) => x.minute === minute);
    if (b === undefined) {
      b = { minute, count: 0, samples: [], sessions: undefined };
      ring.push(b);
      while (ring.length > 0 && (ring[0] as Bucket).minute <= minute - MINUTES) ring.shift();
      while (ring.length > MINUTES) ring.shift();
    }
    return b;
  }
}

function keyOf(tenant: string, profile: string): string {
  return JSON.stringify([tenant, profile]);
}

function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? (sorted[mid] as number) : ((sorted[mid - 1] as number) + (sorted[mid] as number)) / 2;
}
