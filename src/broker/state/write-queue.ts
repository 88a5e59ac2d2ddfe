import type { Statements } from './statements.js';

/** Entries queued at most before they are written at once. */
const MAX_QUEUED = 200;
/** How long an entry may wait in the queue. */
const FLUSH_AFTER_MS = 50;
/** A log's entries kept in memory while its writes fail (`WriteFailures.keep`), about 10 MB at most. */
export const LOG_ENTRIES_KEPT = 10_000;
/** How long after a failed write the entries kept from it are tried again. */
const RETRY_AFTER_MS = 1_000;

/** What a queue tells of its failed writes (`WriteFailures.report`). */
export type WriteEvent =
  /** Writing began to fail: `waiting` entries are kept for the next try, `dropped` went (past `keep`). */
  | { kind: 'failing'; error: unknown; waiting: number; dropped: number }
  /** Still failing, at a retry: `dropped` more went since the last report. */
  | { kind: 'dropping'; waiting: number; dropped: number }
  /** Written again; `dropped` went since the last report. */
  | { kind: 'recovered'; dropped: number }
  /** Closed while failing: the `dropped` entries still waiting are lost. */
  | { kind: 'lost'; dropped: number };

/** What a queue does with a batch it could not write. */
export interface WriteFailures {
  /** At most this many entries are kept for the next write; past it the oldest go. 0: a failed batch goes. */
  keep: number;
  report?: (e: WriteEvent) => void;
}

/**
 * Rows of a log table (the audit, the egress audit), or freshness stamps (a session's last seen, a
 * sandbox's last use), queued and written in one transaction within FLUSH_AFTER_MS (and at close;
 * a log's before any read of it), so recording one costs the hot path no disk write of its own.
 * `write` gets each batch; it runs inside the table's transaction. A batch that fails to write (a
 * busy, full or read-only file) never throws at the caller or from the timer: up to
 * `failures.keep` entries are kept and tried again every RETRY_AFTER_MS (meanwhile no call writes:
 * none waits on a file that refuses), the oldest past it dropped, and `failures.report` is told at
 * most once a try.
 *
 * @example
 * const queue = new WriteQueue<Row>((batch) => db.transaction(() => batch.forEach(insert))(), { keep: 10_000, report });
 * queue.add(row);
 */
export class WriteQueue<T> {
  private queue: T[] = [];
  private timer: NodeJS.Timeout | undefined;
  /** Entries are kept from a failed write: only the retry timer writes. */
  private failing = false;
  /** Dropped since the last report. */
  private dropped = 0;

  constructor(private readonly write: (batch: readonly T[]) => void, private readonly failures: WriteFailures = { keep: 0 }) {}

  add(row: T): void {
    this.queue.push(row);
    if (this.failing) this.dropPastKeep();
    else if (this.queue.length >= MAX_QUEUED) this.flush();
    else this.schedule(FLUSH_AFTER_MS);
  }

  /** Writes what is queued now; what fails to write is kept or dropped as `failures` says. */
  flush(): void {
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = undefined;
    const batch = this.queue;
    if (batch.length === 0) return;
    this.queue = [];
    try {
      this.write(batch);
    } catch (error) {
      this.queue = batch;
      this.dropPastKeep();
      const waiting = this.queue.length;
      if (!this.failing) this.tell({ kind: 'failing', error, waiting, dropped: this.dropped });
      else if (this.dropped > 0) this.tell({ kind: 'dropping', waiting, dropped: this.dropped });
      this.failing = waiting > 0;
      if (this.failing) this.schedule(RETRY_AFTER_MS);
      return;
    }
    if (this.failing) this.tell({ kind: 'recovered', dropped: this.dropped });
    this.failing = false;
  }

  /** Flushes; what still cannot be written is lost, and said so. */
  close(): void {
    this.flush();
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = undefined;
    if (this.queue.length > 0) this.tell({ kind: 'lost', dropped: this.dropped + this.queue.length });
    this.queue = [];
    this.failing = false;
  }

  private dropPastKeep(): void {
    const over = this.queue.length - this.failures.keep;
    if (over <= 0) return;
    this.queue = this.queue.slice(over);
    this.dropped += over;
  }

  private tell(e: WriteEvent): void {
    this.dropped = 0;
    this.failures.report?.(e);
  }

  private schedule(afterMs: number): void {
    if (this.timer !== undefined) return;
    this.timer = setTimeout(() => this.flush(), afterMs);
    this.timer.unref();
  }
}

/**
 * Freshness stamps (a session's last seen, a sandbox's last use): the parameters of one UPDATE,
 * queued (`WriteQueue`) and run for each in one transaction. A batch that fails to write (a busy or
 * full file) is dropped: a later stamp writes a newer time, and a stamp is never worth failing a
 * call (a flush at MAX_QUEUED runs in one) or the process (the timer's flush).
 */
export class StampQueue<P extends unknown[]> {
  private readonly queue = new WriteQueue<P>((batch) => this.write(batch), { keep: 0 });

  constructor(private readonly sql: Statements, private readonly update: string) {}

  add(...params: P): void {
    this.queue.add(params);
  }

  flush(): void {
    this.queue.flush();
  }

  private write(batch: readonly P[]): void {
    if (!this.sql.db.open) return;
    const update = this.sql.q(this.update);
    this.sql.db.transaction(() => {
      for (const params of batch) update.run(...params);
    })();
  }
}

/** One line for an operator's log: what the queue of `what` (the audit, ...) could not write, and what that cost. */
export function describeWriteEvent(what: string, e: WriteEvent): string {
  const lost = (n: number) => (n > 0 ? `; ${n} entries were dropped (the oldest, past what is kept)` : '');
  switch (e.kind) {
    case 'failing':
      return `${what} could not be written to state.db (${e.error instanceof Error ? e.error.message : String(e.error)}); ` +
        `its ${e.waiting} newest entries are kept in memory and tried again every ${RETRY_AFTER_MS / 1000} s${lost(e.dropped)}. ` +
        'Free the disk or fix the file\'s permissions (berth home, state.db)';
    case 'dropping':
      return `${what} still cannot be written to state.db; ${e.waiting} entries are kept in memory${lost(e.dropped)}`;
    case 'recovered':
      return `${what} is written to state.db again${lost(e.dropped)}`;
    case 'lost':
      return `${what} could not be written to state.db at close: ${e.dropped} entries are lost`;
  }
}
