import type { Statements } from './statements.js';
import { entryBytes, LOG_BYTES_KEPT, WriteQueue, type WriteBacklog, type WriteEvent } from './write-queue.js';

/**
 * One decision of berth's egress proxy as the audit keeps it: who asked, what for, how it was
 * decided and how much went through. Never a credential value or placeholder (the recorder masks
 * any placeholder a sandbox put in a host name or a ClientHello).
 */
export interface EgressAuditEntry {
  timeMs: number;
  tenant: string;
  profile: string;
  session: string | null;
  user: string | null;
  sandboxKey: string;
  host: string;
  port: number;
  /** `tls-tunnel`, `tcp-tunnel`, `http` or `intercepted`. */
  channel: string;
  allowed: boolean;
  rule: string;
  detail: string | null;
  bytesUp: number;
  bytesDown: number;
  /** Names of the credentials whose values the request carried, sorted. */
  credentials: string[];
  /** The HTTP status the sandbox got (HTTP requests and refusals). */
  status: number | null;
}

export const EGRESS_AUDIT_SCHEMA = `
CREATE TABLE IF NOT EXISTS egress_audit (
  id INTEGER PRIMARY KEY AUTOINCREMENT, time_ms INTEGER NOT NULL, tenant TEXT NOT NULL, profile TEXT NOT NULL,
  session TEXT, user TEXT, sandbox_key TEXT NOT NULL, host TEXT NOT NULL, port INTEGER NOT NULL, channel TEXT NOT NULL,
  allowed INTEGER NOT NULL, rule TEXT NOT NULL, detail TEXT, bytes_up INTEGER NOT NULL, bytes_down INTEGER NOT NULL,
  credentials TEXT NOT NULL, status INTEGER);
CREATE INDEX IF NOT EXISTS egress_audit_time ON egress_audit (time_ms);
CREATE INDEX IF NOT EXISTS egress_audit_tenant ON egress_audit (tenant, id);
`;

const COLUMNS = `time_ms AS timeMs, tenant, profile, session, user, sandbox_key AS sandboxKey, host, port, channel,
  allowed, rule, detail, bytes_up AS bytesUp, bytes_down AS bytesDown, credentials, status`;

export interface EgressAuditFilter {
  tenant: string;
  /** Only these profiles' decisions (a token's profiles); all of the tenant's when absent. */
  profiles?: readonly string[] | undefined;
  user?: string | undefined;
  session?: string | undefined;
  /** Only this sandbox's decisions (with `profiles`, as a key is a profile's). */
  sandboxKey?: string | undefined;
  /** Only allowed (true) or only refused (false) decisions. */
  allowed?: boolean | undefined;
  /** At most this many, newest first (default 100). */
  limit?: number | undefined;
}

type Row = Omit<EgressAuditEntry, 'allowed' | 'credentials'> & { allowed: number; credentials: string };

/**
 * The egress audit: every decision of the proxy, newest first when read, queued like the call
 * audit (`WriteQueue`) so a busy tunnel's decisions cost the proxy no disk write of their own.
 */
export class EgressTable {
  private readonly queue: WriteQueue<EgressAuditEntry>;

  /** @param report told when entries cannot be written (`WriteQueue`: the newest are kept, up to LOG_BYTES_KEPT, and tried again) */
  constructor(private readonly sql: Statements, report?: (e: WriteEvent) => void) {
    this.queue = new WriteQueue<EgressAuditEntry>((batch) => this.write(batch), { keep: LOG_BYTES_KEPT, size: entryBytes, ...(report === undefined ? {} : { report }) });
  }

  add(e: EgressAuditEntry): void {
    this.queue.add(e);
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

  /** `audit.retentionDays`: deletes decisions made before `beforeMs`. Returns how many went. */
  prune(beforeMs: number): number {
    if (!this.sql.db.open) return 0;
    return this.sql.q('DELETE FROM egress_audit WHERE time_ms < ?').run(beforeMs).changes;
  }

  list(filter: EgressAuditFilter): EgressAuditEntry[] {
    this.flush();
    const where = ['tenant = @tenant'];
    if (filter.profiles !== undefined) where.push('profile IN (SELECT value FROM json_each(@profiles))');
    if (filter.user !== undefined) where.push('user = @user');
    if (filter.session !== undefined) where.push('session = @session');
    if (filter.sandboxKey !== undefined) where.push('sandbox_key = @sandboxKey');
    if (filter.allowed !== undefined) where.push('allowed = @allowed');
    const rows = this.sql.q(`SELECT ${COLUMNS} FROM egress_audit WHERE ${where.join(' AND ')} ORDER BY id DESC LIMIT @limit`).all({
      tenant: filter.tenant, user: filter.user ?? null, session: filter.session ?? null, sandboxKey: filter.sandboxKey ?? null, allowed: filter.allowed === true ? 1 : 0,
      profiles: JSON.stringify(filter.profiles ?? []), limit: filter.limit ?? 100,
    }) as Row[];
    return rows.map((r) => ({ ...r, allowed: r.allowed === 1, credentials: r.credentials === '' ? [] : r.credentials.split(',') }));
  }

  private write(batch: readonly EgressAuditEntry[]): void {
    if (!this.sql.db.open) return;
    const insert = this.sql.q(`INSERT INTO egress_audit (time_ms, tenant, profile, session, user, sandbox_key, host, port, channel,
      allowed, rule, detail, bytes_up, bytes_down, credentials, status) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`);
    this.sql.db.transaction(() => {
      for (const e of batch) {
        insert.run(e.timeMs, e.tenant, e.profile, e.session, e.user, e.sandboxKey, e.host, e.port, e.channel, e.allowed ? 1 : 0,
          e.rule, e.detail, e.bytesUp, e.bytesDown, e.credentials.join(','), e.status);
      }
    })();
  }
}
