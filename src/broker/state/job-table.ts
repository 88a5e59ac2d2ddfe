import type Database from 'better-sqlite3';
import type { Statements } from './statements.js';

/** A background job: its output lives in the sandbox under `dir`; this is its index entry. */
export interface JobRecord {
  id: string;
  tenant: string;
  profile: string;
  /** The session ref of the scope that started it (see `sessionRefOf`). */
  session: string;
  /** The end user of the call that started it, or null: only the same user (or no user) sees the job. */
  user: string | null;
  digest: string;
  sandboxKey: string;
  /** The normalised call scope that started it (JSON), to reattach its sandbox after a restart. */
  scope: string;
  /** The command line, redacted. */
  command: string;
  dir: string;
  startedMs: number;
  status: 'running' | 'exited' | 'killed' | 'unknown';
  exitCode: number | null;
  endedMs: number | null;
}

export const JOB_SCHEMA = `
CREATE TABLE IF NOT EXISTS jobs (
  id TEXT PRIMARY KEY, tenant TEXT NOT NULL, profile TEXT NOT NULL, session TEXT NOT NULL, user TEXT, digest TEXT NOT NULL,
  sandbox_key TEXT NOT NULL, scope TEXT NOT NULL, command TEXT NOT NULL, dir TEXT NOT NULL, started_ms INTEGER NOT NULL,
  status TEXT NOT NULL, exit_code INTEGER, ended_ms INTEGER, kill_started_ms INTEGER);
CREATE INDEX IF NOT EXISTS jobs_session ON jobs (tenant, profile, session);
CREATE INDEX IF NOT EXISTS jobs_digest ON jobs (digest, status);
`;

interface JobRow {
  id: string; tenant: string; profile: string; session: string; user: string | null; digest: string; sandbox_key: string; scope: string;
  command: string; dir: string; started_ms: number; status: string; exit_code: number | null; ended_ms: number | null;
}

function toJob(r: JobRow): JobRecord {
  return {
    id: r.id, tenant: r.tenant, profile: r.profile, session: r.session, user: r.user, digest: r.digest, sandboxKey: r.sandbox_key,
    scope: r.scope, command: r.command, dir: r.dir, startedMs: r.started_ms, status: r.status as JobRecord['status'],
    exitCode: r.exit_code, endedMs: r.ended_ms,
  };
}

/**
 * Stores made before jobs carried their user get the column, filled from each job's stored scope
 * (so an old job stays its own user's); those made before kills were marked get `kill_started_ms`.
 * Under an immediate transaction: concurrent openers add each once.
 */
export function migrateJobs(db: Database.Database): void {
  const has = (name: string) => (db.prepare('PRAGMA table_info(jobs)').all() as Array<{ name: string }>).some((c) => c.name === name);
  if (has('user') && has('kill_started_ms')) return;
  db.transaction(() => {
    if (!has('user')) {
      db.exec('ALTER TABLE jobs ADD COLUMN user TEXT');
      // A scope that does not parse gets '', which no caller has (scopes drop empty strings): not found for all.
      db.exec("UPDATE jobs SET user = CASE WHEN json_valid(scope) THEN json_extract(scope, '$.user') ELSE '' END");
    }
    if (!has('kill_started_ms')) db.exec('ALTER TABLE jobs ADD COLUMN kill_started_ms INTEGER');
  }).immediate();
}

/** The index of background jobs, by tenant, session and end user; the truth about a job is in its sandbox. */
export class JobTable {
  constructor(private readonly sql: Statements) {}

  put(j: JobRecord): void {
    this.sql.q(`INSERT INTO jobs (id, tenant, profile, session, user, digest, sandbox_key, scope, command, dir, started_ms, status, exit_code, ended_ms)
      VALUES (@id, @tenant, @profile, @session, @user, @digest, @sandboxKey, @scope, @command, @dir, @startedMs, @status, @exitCode, @endedMs)`).run(j);
  }

  /**
   * One job of one tenant's session and end user (`null`: a call with no user): an id from another
   * tenant, session or user is not found. `user IS ?` matches null to null only.
   */
  get(tenant: string, profile: string, session: string, user: string | null, id: string): JobRecord | undefined {
    const row = this.sql.q('SELECT * FROM jobs WHERE id = ? AND tenant = ? AND profile = ? AND session = ? AND user IS ?')
      .get(id, tenant, profile, session, user) as JobRow | undefined;
    return row ? toJob(row) : undefined;
  }

  /** The jobs of one session started by one end user (`null`: calls with no user), oldest first. */
  list(tenant: string, profile: string, session: string, user: string | null): JobRecord[] {
    const rows = this.sql.q('SELECT * FROM jobs WHERE tenant = ? AND profile = ? AND session = ? AND user IS ? ORDER BY started_ms, id')
      .all(tenant, profile, session, user) as JobRow[];
    return rows.map(toJob);
  }

  /** A tenant's latest jobs of the given profiles, newest first (the dashboard's view). */
  ofTenant(tenant: string, profiles: readonly string[], limit: number): JobRecord[] {
    const rows = this.sql.q(`SELECT * FROM jobs WHERE tenant = ? AND profile IN (SELECT value FROM json_each(?))
      ORDER BY started_ms DESC, id DESC LIMIT ?`).all(tenant, JSON.stringify(profiles), limit) as JobRow[];
    return rows.map(toJob);
  }

  /** The latest jobs of every tenant, newest first (the operator's view, `berth top`). */
  recent(limit: number): JobRecord[] {
    return (this.sql.q('SELECT * FROM jobs ORDER BY started_ms DESC, id DESC LIMIT ?').all(limit) as JobRow[]).map(toJob);
  }

  /** Jobs last known to be running in a sandbox (any tenant: the idle reaper asks per sandbox). */
  runningIn(digest: string): JobRecord[] {
    return (this.sql.q("SELECT * FROM jobs WHERE digest = ? AND status = 'running'").all(digest) as JobRow[]).map(toJob);
  }

  /** Records a job's end; only a running job changes (the first observed end wins; see `endKilled` for the one exception). */
  end(id: string, status: 'exited' | 'unknown', exitCode: number | null, nowMs: number): void {
    this.sql.q("UPDATE jobs SET status = ?, exit_code = ?, ended_ms = ? WHERE id = ? AND status = 'running'")
      .run(status, exitCode, nowMs, id);
  }

  /**
   * Records that berth killed a job: over a running one, and over an `unknown` end recorded since
   * `killStartedMs`. A reader that found the job's processes gone and no exit code while the kill
   * ran recorded the kill's own doing as unknown; the kill knows better.
   */
  endKilled(id: string, nowMs: number, killStartedMs: number): void {
    this.sql.q("UPDATE jobs SET status = 'killed', exit_code = NULL, ended_ms = ? WHERE id = ? AND (status = 'running' OR (status = 'unknown' AND ended_ms >= ?))")
      .run(nowMs, id, killStartedMs);
  }

  /** Marks a running job as being killed from `nowMs` (a reader that finds its processes gone meanwhile leaves its end to the kill). */
  markKilling(id: string, nowMs: number): void {
    this.sql.q("UPDATE jobs SET kill_started_ms = ? WHERE id = ? AND status = 'running'").run(nowMs, id);
  }

  /** The kill of a job has ended, however it went. */
  clearKilling(id: string): void {
    this.sql.q('UPDATE jobs SET kill_started_ms = NULL WHERE id = ?').run(id);
  }

  /** When the kill under way of a running job began, or undefined when none is (or it has ended). */
  killStartedMs(id: string): number | undefined {
    const row = this.sql.q("SELECT kill_started_ms AS k FROM jobs WHERE id = ? AND status = 'running'").get(id) as { k: number | null } | undefined;
    return row?.k ?? undefined;
  }

  delete(id: string): void {
    this.sql.q('DELETE FROM jobs WHERE id = ?').run(id);
  }
}
