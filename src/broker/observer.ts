import type { EgressEvent } from '../egress/types.js';

/** The kinds of call a broker records and reports: a command, a job's start, a file call. */
export type CallKind = 'exec' | 'job' | 'upload' | 'read' | 'export' | 'media';

/** What one finished call looked like: never its command text, session or user. */
export interface CallObservation {
  kind: CallKind;
  tenant: string;
  /** The profile of the call (a label of no metric; the dashboard keeps a token to its profiles). */
  profile: string;
  backend: string;
  durationMs: number;
  /** The call had to bring its sandbox up in this process (create it, or start a known one). */
  cold: boolean;
  /** A command that ran out of its time (exit code 124). */
  timedOut: boolean;
  /** The error code when the call failed instead of returning a result. */
  errorCode: string | undefined;
}

/** A sandbox a reaper removed (orphan, idle and ephemeral) or hibernated (idle and persistent). */
export interface ReapObservation {
  reason: 'idle' | 'orphan' | 'hibernated';
  tenant: string | undefined;
  backend: string | undefined;
}

/**
 * What the broker tells whoever watches it (the server's metrics). The one place calls, refusals
 * and reaper removals are reported; an observer must not throw and must not block.
 *
 * @example
 * const stop = broker.observe({ callEnded: (o) => count(o.backend), refused: () => {}, reaped: () => {} });
 */
export interface BrokerObserver {
  callEnded(o: CallObservation): void;
  /** A call refused by policy, credentials or a limit, by its error code. */
  refused(o: { code: string; tenant: string | undefined }): void;
  reaped(o: ReapObservation): void;
  /** A new sandbox that a warm pool could serve: whether it did (hit) or was created the usual way (miss). */
  poolClaimed?(o: { backend: string; hit: boolean }): void;
  /** One decision of the egress proxy for a sandbox (never a value or a placeholder in it). */
  egress?(e: EgressEvent): void;
}

/** The observers of one broker: each event goes to every observer; one that throws is skipped. */
export class Observers implements BrokerObserver {
  private readonly list = new Set<BrokerObserver>();

  add(o: BrokerObserver): () => void {
    this.list.add(o);
    return () => this.list.delete(o);
  }

  callEnded(o: CallObservation): void {
    this.each((x) => x.callEnded(o));
  }

  refused(o: { code: string; tenant: string | undefined }): void {
    this.each((x) => x.refused(o));
  }

  reaped(o: ReapObservation): void {
    this.each((x) => x.reaped(o));
  }

  poolClaimed(o: { backend: string; hit: boolean }): void {
    this.each((x) => x.poolClaimed?.(o));
  }

  egress(e: EgressEvent): void {
    this.each((x) => x.egress?.(e));
  }

  private each(f: (o: BrokerObserver) => void): void {
    for (const o of this.list) {
      try {
        f(o);
      } catch {
        // An observer is bookkeeping: it never fails the call it watches.
      }
    }
  }
}
