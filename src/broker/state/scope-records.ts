import type { Statements } from './statements.js';

export interface CwdRecord {
  cwd: string;
  backend: string;
}

export const SCOPE_RECORDS_SCHEMA = `
CREATE TABLE IF NOT EXISTS cwd_records (
  shell TEXT PRIMARY KEY, tenant TEXT NOT NULL, profile TEXT NOT NULL, session TEXT,
  cwd TEXT NOT NULL, backend TEXT NOT NULL, updated_ms INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS aliases (
  tenant TEXT NOT NULL, profile TEXT NOT NULL, child TEXT NOT NULL, parent TEXT NOT NULL, session TEXT,
  PRIMARY KEY (tenant, profile, child));
CREATE TABLE IF NOT EXISTS task_overrides (
  tenant TEXT NOT NULL, profile TEXT NOT NULL, task TEXT NOT NULL, override TEXT NOT NULL, session TEXT,
  PRIMARY KEY (tenant, profile, task));
`;

/**
 * What berth remembers of call scopes from one call to the next: where each shell identity's
 * commands left it (cwd records), each subagent task's parent (aliases), each task's override.
 * A session's close forgets the ones recorded under it (`SessionTable.close`).
 */
export class ScopeRecords {
  constructor(private readonly sql: Statements) {}

  getCwd(shell: string): CwdRecord | undefined {
    return this.sql.q('SELECT cwd, backend FROM cwd_records WHERE shell = ?').get(shell) as CwdRecord | undefined;
  }

  putCwd(shell: string, r: { tenant: string; profile: string; session: string | null; cwd: string; backend: string }, nowMs: number): void {
    this.sql.q(`INSERT INTO cwd_records (shell, tenant, profile, session, cwd, backend, updated_ms) VALUES (?, ?, ?, ?, ?, ?, ?)
      ON CONFLICT (shell) DO UPDATE SET cwd = excluded.cwd, backend = excluded.backend, updated_ms = excluded.updated_ms`)
      .run(shell, r.tenant, r.profile, r.session, r.cwd, r.backend, nowMs);
  }

  aliasParent(tenant: string, profile: string, child: string): string | undefined {
    const row = this.sql.q('SELECT parent FROM aliases WHERE tenant = ? AND profile = ? AND child = ?')
      .get(tenant, profile, child) as { parent: string } | undefined;
    return row?.parent;
  }

  /** Subagents registered directly under `parent`, with the session each was registered in (null: none). */
  childrenOf(tenant: string, profile: string, parent: string): { child: string; session: string | null }[] {
    return this.sql.q('SELECT child, session FROM aliases WHERE tenant = ? AND profile = ? AND parent = ? ORDER BY child')
      .all(tenant, profile, parent) as { child: string; session: string | null }[];
  }

  /** Tasks registered as subagents in a session. */
  tasksOfSession(tenant: string, profile: string, session: string): string[] {
    return (this.sql.q('SELECT child FROM aliases WHERE tenant = ? AND profile = ? AND session = ? ORDER BY child')
      .all(tenant, profile, session) as { child: string }[]).map((r) => r.child);
  }

  putAlias(tenant: string, profile: string, child: string, parent: string, session: string | null): void {
    this.sql.q(`INSERT INTO aliases (tenant, profile, child, parent, session) VALUES (?, ?, ?, ?, ?)
      ON CONFLICT (tenant, profile, child) DO UPDATE SET parent = excluded.parent, session = excluded.session`)
      .run(tenant, profile, child, parent, session);
  }

  taskOverride(tenant: string, profile: string, task: string): unknown {
    const row = this.sql.q('SELECT override FROM task_overrides WHERE tenant = ? AND profile = ? AND task = ?')
      .get(tenant, profile, task) as { override: string } | undefined;
    return row ? JSON.parse(row.override) : undefined;
  }

  putTaskOverride(tenant: string, profile: string, task: string, override: unknown, session: string | null): void {
    this.sql.q(`INSERT INTO task_overrides (tenant, profile, task, override, session) VALUES (?, ?, ?, ?, ?)
      ON CONFLICT (tenant, profile, task) DO UPDATE SET override = excluded.override, session = excluded.session`)
      .run(tenant, profile, task, JSON.stringify(override), session);
  }
}
