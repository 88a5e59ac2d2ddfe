import type { Statements } from './statements.js';

/** Entries queued at most before they are written at once. */
const MAX_QUEUED = 200;
/** How long an entry may wait in the queue. */
const FLUSH_AFTER_MS = 50;

/**
 * Rows of a log table (the audit, the egress audit), or freshness stamps (a session's last seen, a
 * sandbox's last use), queued and written in one transaction within FLUSH_AFTER_MS (and at close;
 * a log's before any read of it), so recording one costs the hot path no disk write of its own.
 * `write` gets each batch; it runs inside the table's transaction.
 *
 * @example
 * const queue = new WriteQueue<Row>((batch) => db.transaction(() => batch.forEach(insert))());
 * queue.add(row);
 */
export class WriteQueue<T> {
  private queue: T[] = [];
  private timer: NodeJS.Timeout | undefined;

  constructor(private readonly write: (batch: readonly T[]) => void) {}

  add(row: T): void {
    this.queue.push(row);
    if (this.queue.length >= MAX_QUEUED) this.flush();
    else if (this.timer === undefined) {
      this.timer = setTimeout(() => this.flush(), FLUSH_AFTER_MS);
      this.timer.unref();
    }
  }

  /** Writes what is queued now (nothing when `write` cannot: it is told of every batch, it decides). */
  flush(): void {
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = undefined;
    const batch = this.queue;
    if (batch.length === 0) return;
    this.queue = [];
    this.write(batch);
  }
}

/**
 * Freshness stamps (a session's last seen, a sandbox's last use): the parameters of one UPDATE,
 * queued (`WriteQueue`) and run for each in one transaction. A batch that fails to write (a busy or
 * full file) is dropped: a later stamp writes a newer time, and a stamp is never worth failing a
 * call (a flush at MAX_QUEUED runs in one) or the process (the timer's flush).
 */
export class StampQueue<P extends unknown[]> {
  private readonly queue = new WriteQueue<P>((batch) => this.write(batch));

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
    try {
      this.sql.db.transaction(() => {
        for (const params of batch) update.run(...params);
      })();
    } catch {
      // Dropped, as said above.
    }
  }
}
