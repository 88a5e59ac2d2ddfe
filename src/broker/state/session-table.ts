import type { Statements } from './statements.js';
import { StampQueue, stampParams, stampsBack, stampSql } from './write-queue.js';

export interface SessionRecord {
  tenant: string;
  profile: string;
  session: string;
  openedMs: number;
  closedMs: number | null;
  lastSeenMs: number;
  /** The process that holds the session open (`pid:starttime`), or null when detached (CLI). */
  owner: string | null;
}

export const SESSION_SCHEMA = `
CREATE TABLE IF NOT EXISTS sessions (
  tenant TEXT NOT NULL, profile TEXT NOT NULL, session TEXT NOT NULL, opened_ms INTEGER NOT NULL,
  closed_ms INTEGER, last_seen_ms INTEGER NOT NULL, owner TEXT,
  PRIMARY KEY (tenant, profile, session));
CREATE TABLE IF NOT EXISTS session_sandboxes (
  tenant TEXT NOT NULL, profile TEXT NOT NULL, session TEXT NOT NULL, digest TEXT NOT NULL,
  PRIMARY KEY (tenant, profile, session, digest));
CREATE INDEX IF NOT EXISTS session_sandboxes_digest ON session_sandboxes (digest);
`;

interface SessionRow {
  tenant: string; profile: string; session: string; opened_ms: number; closed_ms: number | null;
  last_seen_ms: number; owner: string | null;
}

function toSession(r: SessionRow): SessionRecord {
  return {
    tenant: r.tenant, profile: r.profile, session: r.session, openedMs: r.opened_ms, closedMs: r.closed_ms,
    lastSeenMs: r.last_seen_ms, owner: r.owner,
  };
}

/** The sessions of this installation, who holds each, and the sandboxes each is linked to. */
export class SessionTable {
  /** `touch`es not yet written; see `touch`. */
  private readonly touches: StampQueue<[...stamp: ReturnType<typeof stampParams>, tenant: string, profile: string, session: string]>;

  constructor(private readonly sql: Statements) {
    this.touches = new StampQueue(sql, `UPDATE sessions SET last_seen_ms = ${stampSql('last_seen_ms')} WHERE tenant = ? AND profile = ? AND session = ?`);
  }

  /** Opens (or re-opens) a session and links it to a sandbox. */
  open(tenant: string, profile: string, session: string, digest: string, owner: string | null, nowMs: number): void {
    this.sql.db.transaction(() => {
      this.sql.q(`INSERT INTO sessions (tenant, profile, session, opened_ms, closed_ms, last_seen_ms, owner)
        VALUES (?, ?, ?, ?, NULL, ?, ?)
        ON CONFLICT (tenant, profile, session) DO UPDATE SET
          opened_ms = CASE WHEN closed_ms IS NULL THEN opened_ms ELSE excluded.opened_ms END,
          closed_ms = NULL, last_seen_ms = excluded.last_seen_ms, owner = excluded.owner`)
        .run(tenant, profile, session, nowMs, nowMs, owner);
      this.sql.q('INSERT OR IGNORE INTO session_sandboxes (tenant, profile, session, digest) VALUES (?, ?, ?, ?)')
        .run(tenant, profile, session, digest);
    })();
  }

  /**
   * Moves a session's `last_seen_ms` forward to `nowMs`, within the write queue's delay (one
   * transaction for many, not a disk write per call; `flushTouches` at close). Never moves it back,
   * so a late write cannot undo a newer one (but for a stamp from before the wall clock stepped
   * back, see `SandboxTable.touch`). Reads do not wait for the queue: the stamp is already
   * up to `SESSION_TOUCH_MS` old by design (session-links.ts), and no decision of this process reads it.
   */
  touch(tenant: string, profile: string, session: string, nowMs: number): void {
    this.touches.add(...stampParams(nowMs), tenant, profile, session);
  }

  /** Sets every `last_seen_ms` more than STAMP_AHEAD_MS ahead of `nowMs` (the wall clock stepped back since) to `nowMs`. */
  stampsBack(nowMs: number): void {
    stampsBack(this.sql, 'sessions', 'last_seen_ms', nowMs);
  }

  /** Writes the queued touches now. */
  flushTouches(): void {
    this.touches.flush();
  }

  get(tenant: string, profile: string, session: string): SessionRecord | undefined {
    const row = this.sql.q('SELECT * FROM sessions WHERE tenant = ? AND profile = ? AND session = ?')
      .get(tenant, profile, session) as SessionRow | undefined;
    return row ? toSession(row) : undefined;
  }

  /** Releases ownership of the sessions a process held (they stay open, detached). */
  releaseHeldBy(owner: string): void {
    this.sql.q('UPDATE sessions SET owner = NULL WHERE owner = ?').run(owner);
  }

  /**
   * Marks a session closed and forgets what berth remembered for its calls (cwd records, aliases,
   * task overrides) and its links; returns the digests of the sandboxes it was linked to.
   */
  close(tenant: string, profile: string, session: string, nowMs: number): { wasOpen: boolean; digests: string[] } {
    return this.sql.db.transaction(() => {
      const wasOpen = this.sql.q('SELECT 1 FROM sessions WHERE tenant = ? AND profile = ? AND session = ? AND closed_ms IS NULL')
        .get(tenant, profile, session) !== undefined;
      this.sql.q('UPDATE sessions SET closed_ms = ?, owner = NULL WHERE tenant = ? AND profile = ? AND session = ?')
        .run(nowMs, tenant, profile, session);
      this.sql.q('DELETE FROM cwd_records WHERE tenant = ? AND profile = ? AND session = ?').run(tenant, profile, session);
      this.sql.q('DELETE FROM aliases WHERE tenant = ? AND profile = ? AND session = ?').run(tenant, profile, session);
      this.sql.q('DELETE FROM task_overrides WHERE tenant = ? AND profile = ? AND session = ?').run(tenant, profile, session);
      const digests = this.sql.q('SELECT digest FROM session_sandboxes WHERE tenant = ? AND profile = ? AND session = ?')
        .all(tenant, profile, session) as { digest: string }[];
      this.sql.q('DELETE FROM session_sandboxes WHERE tenant = ? AND profile = ? AND session = ?').run(tenant, profile, session);
      return { wasOpen, digests: digests.map((d) => d.digest) };
    })();
  }

  /** How many sandboxes a session is linked to. */
  sandboxCountOf(tenant: string, profile: string, session: string): number {
    return (this.sql.q('SELECT COUNT(*) AS n FROM session_sandboxes WHERE tenant = ? AND profile = ? AND session = ?')
      .get(tenant, profile, session) as { n: number }).n;
  }

  /** Sessions linked to a sandbox (open or not). */
  ofSandbox(digest: string): SessionRecord[] {
    const rows = this.sql.q(`SELECT s.* FROM sessions s JOIN session_sandboxes l
      ON s.tenant = l.tenant AND s.profile = l.profile AND s.session = l.session WHERE l.digest = ?`).all(digest);
    return (rows as SessionRow[]).map(toSession);
  }

  list(tenant?: string): SessionRecord[] {
    const rows = tenant === undefined
      ? this.sql.q('SELECT * FROM sessions').all()
      : this.sql.q('SELECT * FROM sessions WHERE tenant = ?').all(tenant);
    return (rows as SessionRow[]).map(toSession);
  }
}
