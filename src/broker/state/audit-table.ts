import type Database from 'better-sqlite3';
import { capAuditText } from './audit-text.js';
import type { Statements } from './statements.js';
import { entryBytes, LOG_BYTES_KEPT, WriteQueue, type WriteBacklog, type WriteEvent } from './write-queue.js';

export interface AuditEntry {
  timeMs: number;
  tenant: string;
  profile: string;
  user: string | null;
  session: string | null;
  sandboxKey: string | null;
  kind: string;
  command: string | null;
  exitCode: number | null;
  durationMs: number | null;
  /** The bearer token the call came with (remote calls): its id, and its name when it has one. */
  tokenId?: string | null;
  tokenName?: string | null;
}

export const AUDIT_SCHEMA = `
CREATE TABLE IF NOT EXISTS audit (
  id INTEGER PRIMARY KEY AUTOINCREMENT, time_ms INTEGER NOT NULL, tenant TEXT NOT NULL, profile TEXT NOT NULL,
  user TEXT, session TEXT, sandbox_key TEXT, kind TEXT NOT NULL, command TEXT, exit_code INTEGER, duration_ms INTEGER);
CREATE INDEX IF NOT EXISTS audit_time ON audit (time_ms);
`;

/** A state made before tokens were named in the audit has no token columns: add them (older entries name none). */
export function migrateAuditColumns(db: Database.Database): void {
  const added = [['token_id', 'TEXT'], ['token_name', 'TEXT']] as const;
  const missing = () => {
    const have = new Set((db.prepare('PRAGMA table_info(audit)').all() as Array<{ name: string }>).map((c) => c.name));
    return added.filter(([name]) => !have.has(name));
  };
  if (missing().length === 0) return;
  db.transaction(() => {
    for (const [name, type] of missing()) db.exec(`ALTER TABLE audit ADD COLUMN ${name} ${type}`);
  }).immediate();
}

/** An audit row as an `AuditEntry`. */
const AUDIT_COLUMNS = `time_ms AS timeMs, tenant, profile, user, session, sandbox_key AS sandboxKey, kind,
  command, exit_code AS exitCode, duration_ms AS durationMs, token_id AS tokenId, token_name AS tokenName`;

/**
 * The audit log: every call and close, newest first when read. Entries are queued (`WriteQueue`),
 * so recording a call costs the hot path no disk write of its own.
 */
export class AuditTable {
  private readonly queue: WriteQueue<AuditEntry>;

  /**
   * @param maxCommandChars `audit.maxCommandChars`: a recorded command text longer than this is
   * cut, the cut marked (`… [N more chars]`). Texts arrive redacted.
   * @param report told when entries cannot be written (`WriteQueue`: the newest are kept, up to LOG_BYTES_KEPT, and tried again)
   */
  constructor(private readonly sql: Statements, private readonly maxCommandChars: number, report?: (e: WriteEvent) => void) {
    this.queue = new WriteQueue<AuditEntry>((batch) => this.write(batch), { keep: LOG_BYTES_KEPT, size: entryBytes, ...(report === undefined ? {} : { report }) });
  }

  add(e: AuditEntry): void {
    const command = e.command === null ? null : capAuditText(e.command, this.maxCommandChars);
    this.queue.add(command === e.command ? e : { ...e, command });
  }

  flush(): void {
    this.queue.flush();
  }

  /** What its queue holds back while writes fail, and dropped in all. */
  get backlog(): WriteBacklog {
    return this.queue.backlog;
  }

  /** Writes what is queued (the store closes next); what cannot be written is lost, and reported. */
  close(): void {
    this.queue.close();
  }

  private write(batch: readonly AuditEntry[]): void {
    if (!this.sql.db.open) return;
    const insert = this.sql.q(`INSERT INTO audit (time_ms, tenant, profile, user, session, sandbox_key, kind, command, exit_code, duration_ms, token_id, token_name)
      VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`);
    this.sql.db.transaction(() => {
      for (const e of batch) {
        insert.run(e.timeMs, e.tenant, e.profile, e.user, e.session, e.sandboxKey, e.kind, e.command, e.exitCode, e.durationMs, e.tokenId ?? null, e.tokenName ?? null);
      }
    })();
  }

  /**
   * `audit.retentionDays`: deletes entries recorded before `beforeMs` (queued ones are newer).
   * Returns how many went.
   */
  prune(beforeMs: number): number {
    if (!this.sql.db.open) return 0;
    return this.sql.q('DELETE FROM audit WHERE time_ms < ?').run(beforeMs).changes;
  }

  list(filter: { tenant: string; profiles?: readonly string[]; user?: string; session?: string; limit?: number }): AuditEntry[] {
    this.flush();
    const where = ['tenant = @tenant'];
    if (filter.profiles !== undefined) where.push('profile IN (SELECT value FROM json_each(@profiles))');
    if (filter.user !== undefined) where.push('user = @user');
    if (filter.session !== undefined) where.push('session = @session');
    const rows = this.sql.q(`SELECT ${AUDIT_COLUMNS} FROM audit WHERE ${where.join(' AND ')} ORDER BY id DESC LIMIT @limit`)
      .all({ ...filter, profiles: JSON.stringify(filter.profiles ?? []), limit: filter.limit ?? 100 });
    return rows as AuditEntry[];
  }

  /** The latest entries of every tenant, newest first: the operator's view (`berth top`), never a tenant's. */
  recent(limit: number): AuditEntry[] {
    this.flush();
    return this.sql.q(`SELECT ${AUDIT_COLUMNS} FROM audit ORDER BY id DESC LIMIT ?`).all(limit) as AuditEntry[];
  }
}
