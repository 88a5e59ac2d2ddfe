import type { Statements } from './statements.js';

/** Entries queued at most before they are written at once. */
const MAX_QUEUED = 200;
/** How long an entry may wait in the queue. */
const FLUSH_AFTER_MS = 50;
/** What a log keeps in memory while its writes fail (`WriteFailures.keep`, in `entryBytes`). */
export const LOG_BYTES_KEPT = 16 * 1024 * 1024;
/** How long after a failed write the entries kept from it are tried again. */
const RETRY_AFTER_MS = 1_000;
/** While entries are dropped, how often that is said (they are counted in between). */
const DROPPING_SAID_EVERY_MS = 60_000;

/** What a queue tells of its failed writes (`WriteFailures.report`). */
export type WriteEvent =
  /** Writing began to fail: `waiting` entries are kept for the next try, `dropped` went (past `keep`). */
  | { kind: 'failing'; error: unknown; waiting: number; dropped: number }
  /** Still failing: `dropped` more went since the last report (said at most once a minute). */
  | { kind: 'dropping'; waiting: number; dropped: number }
  /** Written again; `dropped` went since the last report. */
  | { kind: 'recovered'; dropped: number }
  /** Closed while failing: the `dropped` entries still waiting (and any dropped since the last report) are lost. */
  | { kind: 'lost'; dropped: number };

/** What a queue holds back while its writes fail, and what it dropped in all (`WriteQueue.backlog`). */
export interface WriteBacklog {
  /** Entries kept in memory, not yet written, while writes fail (0 while they succeed). */
  unwritten: number;
  /** Entries dropped since the queue was made: past what is kept, or still unwritten at its close. */
  dropped: number;
}

/** What a queue does with a batch it could not write. */
export interface WriteFailures<T> {
  /** At most this much (`size` of each, summed) is kept for the next write; past it the oldest go. 0: a failed batch goes. */
  keep: number;
  /** An entry's share of `keep` (default 1: `keep` counts entries). */
  size?: (entry: T) => number;
  report?: (e: WriteEvent) => void;
}

/** About what an entry of a log holds in memory, in bytes: its strings (two bytes a character at most) and a little more. */
export function entryBytes(entry: object): number {
  let bytes = 64;
  for (const v of Object.values(entry)) {
    if (typeof v === 'string') bytes += 2 * v.length;
    else if (Array.isArray(v)) bytes += v.reduce((n: number, x: unknown) => n + (typeof x === 'string' ? 2 * x.length : 8), 0);
    else bytes += 8;
  }
  return bytes;
}

/**
 * Rows of a log table (the audit, the egress audit), or freshness stamps (a session's last seen, a
 * sandbox's last use), queued and written in one transaction within FLUSH_AFTER_MS (and at close;
 * a log's before any read of it), so recording one costs the hot path no disk write of its own.
 * `write` gets each batch; it runs inside the table's transaction.
 *
 * A batch that fails to write (a busy, full or read-only file) never throws at the caller or from
 * the timer. Up to `failures.keep` of it is kept, the oldest past it dropped, and tried again every
 * RETRY_AFTER_MS. Meanwhile only that retry (and the close) writes: no call or read waits on a file
 * that refuses, and a read shows what is on disk. `failures.report` is told when it begins to
 * fail, of drops (at most once a minute), when it writes again, and of what the close could not write.
 *
 * @example
 * const queue = new WriteQueue<Row>((batch) => db.transaction(() => batch.forEach(insert))(), { keep: LOG_BYTES_KEPT, size: entryBytes, report });
 * queue.add(row);
 */
export class WriteQueue<T> {
  private queue: T[] = [];
  /** `size` of what is queued, summed: counted only while writes fail (the bound applies then alone). */
  private held = 0;
  private timer: NodeJS.Timeout | undefined;
  /** Entries are kept from a failed write: only the retry timer (and the close) writes. */
  private failing = false;
  /** Dropped since the last report. */
  private dropped = 0;
  private droppedTotal = 0;
  private droppingSaidMs = 0;

  constructor(private readonly write: (batch: readonly T[]) => void, private readonly failures: WriteFailures<T> = { keep: 0 }) {}

  add(entry: T): void {
    this.queue.push(entry);
    if (this.failing) {
      this.held += this.sizeOf(entry);
      this.dropPastKeep();
    } else if (this.queue.length >= MAX_QUEUED) this.tryWrite();
    else this.schedule(FLUSH_AFTER_MS);
  }

  /** Writes what is queued now (a read's, so it sees it); while writes fail, only the retry does. */
  flush(): void {
    if (!this.failing) this.tryWrite();
  }

  /** What it holds back and dropped, for a gauge an operator can alert on. */
  get backlog(): WriteBacklog {
    return { unwritten: this.failing ? this.queue.length : 0, dropped: this.droppedTotal };
  }

  /** Tries once more; what still cannot be written is lost, and said so. */
  close(): void {
    this.tryWrite();
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = undefined;
    const lost = this.dropped + this.queue.length;
    this.droppedTotal += this.queue.length;
    this.queue = [];
    this.held = 0;
    this.failing = false;
    if (lost > 0) this.tell({ kind: 'lost', dropped: lost });
  }

  private tryWrite(): void {
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = undefined;
    const batch = this.queue;
    if (batch.length === 0) return;
    this.queue = [];
    try {
      this.write(batch);
    } catch (error) {
      this.queue = batch;
      // Kept up while failing (add, dropPastKeep); summed once when it begins.
      if (!this.failing) this.held = batch.reduce((n, e) => n + this.sizeOf(e), 0);
      this.dropPastKeep();
      const began = !this.failing;
      // The queue's state first, then the report: a report that reads or adds finds it settled.
      this.failing = this.queue.length > 0;
      if (this.failing) this.schedule(RETRY_AFTER_MS);
      if (began) this.tell({ kind: 'failing', error, waiting: this.queue.length, dropped: this.dropped });
      else if (this.dropped > 0 && Date.now() - this.droppingSaidMs >= DROPPING_SAID_EVERY_MS) {
        this.droppingSaidMs = Date.now();
        this.tell({ kind: 'dropping', waiting: this.queue.length, dropped: this.dropped });
      }
      return;
    }
    const recovered = this.failing;
    this.failing = false;
    this.held = 0;
    if (recovered) this.tell({ kind: 'recovered', dropped: this.dropped });
  }

  private sizeOf(entry: T): number {
    return this.failures.size?.(entry) ?? 1;
  }

  private dropPastKeep(): void {
    let over = 0;
    while (over < this.queue.length && this.held > this.failures.keep) this.held -= this.sizeOf(this.queue[over++] as T);
    if (over === 0) return;
    this.queue = this.queue.slice(over);
    this.dropped += over;
    this.droppedTotal += over;
  }

  private tell(e: WriteEvent): void {
    this.dropped = 0;
    this.failures.report?.(e);
  }

  private schedule(afterMs: number): void {
    if (this.timer !== undefined) return;
    this.timer = setTimeout(() => this.tryWrite(), afterMs);
    this.timer.unref();
  }
}

/**
 * A stored freshness stamp further ahead of a new one than this is from before the wall clock
 * stepped back (a VM restored, a clock set by hand): the new one replaces it. Nearer, it is a
 * later write that landed first, and the newer time stays. Writers of one home are never minutes
 * apart: a stamp waits at most a queue's delay and a retry.
 */
export const STAMP_AHEAD_MS = 5 * 60_000;

/**
 * `column = ` the newer of it and a stamp, or the stamp where the column is more than
 * STAMP_AHEAD_MS ahead of it (see there): the SQL, whose parameters are `stampParams(nowMs)`.
 */
export function stampSql(column: string): string {
  return `CASE WHEN ${column} > ? THEN ? ELSE max(${column}, ?) END`;
}

/** The parameters of `stampSql` for a stamp of `nowMs`. */
export function stampParams(nowMs: number): [number, number, number] {
  return [nowMs + STAMP_AHEAD_MS, nowMs, nowMs];
}

/** Sets every `column` of `table` more than STAMP_AHEAD_MS ahead of `nowMs` (the wall clock stepped back since) to `nowMs`. */
export function stampsBack(sql: Statements, table: string, column: string, nowMs: number): void {
  // Looked for first: an UPDATE takes the file's write lock even when it changes nothing.
  if (sql.q(`SELECT 1 FROM ${table} WHERE ${column} > ? LIMIT 1`).get(nowMs + STAMP_AHEAD_MS) === undefined) return;
  sql.q(`UPDATE ${table} SET ${column} = ? WHERE ${column} > ?`).run(nowMs, nowMs + STAMP_AHEAD_MS);
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
