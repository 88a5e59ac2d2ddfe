import { randomUUID } from 'node:crypto';
import type Database from 'better-sqlite3';
import { AUDIT_SCHEMA, AuditTable, migrateAuditColumns } from './audit-table.js';
import { openStateDb } from './berth-home.js';
import { EGRESS_AUDIT_SCHEMA, EgressTable } from './egress-table.js';
import { EGRESS_LISTENER_SCHEMA, EgressListenerTable } from './egress-listener-table.js';
import { JOB_SCHEMA, JobTable, migrateJobs } from './job-table.js';
import { LEASE_SCHEMA, LeaseTable } from './lease-table.js';
import { migrateSandboxColumns, SANDBOX_SCHEMA, SandboxTable } from './sandbox-table.js';
import { SCOPE_RECORDS_SCHEMA, ScopeRecords } from './scope-records.js';
import { SESSION_SCHEMA, SessionTable } from './session-table.js';
import { SNAPSHOT_SCHEMA, SnapshotTable } from './snapshot-table.js';
import { Statements } from './statements.js';
import { describeWriteEvent, type WriteBacklog, type WriteEvent } from './write-queue.js';

const META_SCHEMA = 'CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT NOT NULL);';

export interface StateStoreOptions {
  /**
   * `audit.maxCommandChars`: a recorded command text longer than this is cut, the cut marked
   * (`… [N more chars]`). Texts arrive redacted. Default: not cut (the broker always passes it).
   */
  auditMaxCommandChars?: number | undefined;
  /** Told, as one line for an operator, when the audit's or the egress audit's entries cannot be written (kept in memory, tried again). */
  onWriteFailure?: ((line: string) => void) | undefined;
}

/**
 * berth's state under `BERTH_HOME/state.db`: what this installation owns, so a restarted berth
 * can reattach and reap. One connection; a table (or a few that belong together) per part, each
 * handed only to the parts that need it. Every query is scoped by tenant where a tenant is involved.
 *
 * @example
 * const store = StateStore.open(berthHome);
 * store.sandboxes.list('acme');
 * store.close();
 */
export class StateStore {
  readonly installationId: string;
  readonly sandboxes: SandboxTable;
  readonly sessions: SessionTable;
  readonly scopes: ScopeRecords;
  readonly audit: AuditTable;
  readonly egress: EgressTable;
  readonly egressListeners: EgressListenerTable;
  readonly jobs: JobTable;
  readonly leases: LeaseTable;
  readonly snapshots: SnapshotTable;

  private constructor(private readonly db: Database.Database, opts: StateStoreOptions) {
    const sql = new Statements(db);
    this.sandboxes = new SandboxTable(sql);
    this.sessions = new SessionTable(sql);
    this.scopes = new ScopeRecords(sql);
    const told = opts.onWriteFailure;
    const report = (what: string) => (told === undefined ? undefined : (e: WriteEvent) => told(describeWriteEvent(what, e)));
    this.audit = new AuditTable(sql, opts.auditMaxCommandChars ?? Number.POSITIVE_INFINITY, report('the audit'));
    this.egress = new EgressTable(sql, report('the egress audit'));
    this.egressListeners = new EgressListenerTable(sql);
    this.jobs = new JobTable(sql);
    this.leases = new LeaseTable(sql);
    this.snapshots = new SnapshotTable(sql);
    const row = db.prepare('SELECT v FROM meta WHERE k = ?').get('installation') as { v: string } | undefined;
    if (row) {
      this.installationId = row.v;
    } else {
      db.prepare('INSERT OR IGNORE INTO meta (k, v) VALUES (?, ?)').run('installation', randomUUID());
      // Another process may have won the race: read back what is stored.
      this.installationId = (db.prepare('SELECT v FROM meta WHERE k = ?').get('installation') as { v: string }).v;
    }
  }

  /** Opens (creating if needed) the store in `berthHome`; berth's files there are made private. */
  static open(berthHome: string, opts: StateStoreOptions = {}): StateStore {
    const db = openStateDb(berthHome);
    db.exec([META_SCHEMA, LEASE_SCHEMA, SANDBOX_SCHEMA, SESSION_SCHEMA, SCOPE_RECORDS_SCHEMA, AUDIT_SCHEMA, EGRESS_AUDIT_SCHEMA, EGRESS_LISTENER_SCHEMA, JOB_SCHEMA, SNAPSHOT_SCHEMA].join('\n'));
    migrateJobs(db);
    migrateSandboxColumns(db);
    migrateAuditColumns(db);
    return new StateStore(db, opts);
  }

  /**
   * The connection itself, for another table of the same state read on every request of a
   * server (the token store: `TokenStore.sharing`), so the store's own writes do not drop that
   * reader's page cache.
   */
  get connection(): Database.Database {
    return this.db;
  }

  /** What the audit's and the egress audit's queues hold back while writes fail, and dropped in all (`berth_state_*` metrics). */
  writeBacklog(): Array<WriteBacklog & { log: 'audit' | 'egress_audit' }> {
    return [{ log: 'audit', ...this.audit.backlog }, { log: 'egress_audit', ...this.egress.backlog }];
  }

  close(): void {
    if (!this.db.open) return;
    try {
      this.audit.close();
      this.egress.close();
      this.sessions.flushTouches();
      this.sandboxes.flushTouches();
    } finally {
      // A report that throws (a log sink's) never leaves the file open.
      this.db.close();
    }
  }
}
