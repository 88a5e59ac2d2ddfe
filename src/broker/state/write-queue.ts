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
