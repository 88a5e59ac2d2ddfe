import { randomUUID } from 'node:crypto';
import type Database from 'better-sqlite3';
import { capAuditText } from './audit-text.js';
import { openStateDb } from './berth-home.js';

/** A sandbox this installation created, as the store remembers it. */
export interface SandboxRecord {
  digest: string;
  backend: string;
  tenant: string;
  profile: string | null;
  key: string;
  rule: string;
  ephemeral: boolean;
  ref: string;
  name: string;
  hostDir: string | null;
  mount: string | null;
  createdMs: number;
  lastUsedMs: number;
  /**
   * While `ref` is '' (being created): the process that claimed the creation (`pid:starttime`),
   * so a claim whose process died is abandoned at once instead of after a timeout.
   */
  claimOwner?: string | null;
  /** What it may take of the host (its backend's `reservation`), counted against its tenant's limits; null: unbounded or not known. */
  memoryMb?: number | null;
  diskMb?: number | null;
}

/** A tenant's bounds on the sandboxes it holds (`limits.sandboxes`, `limits.memoryMb`, `limits.diskMb`). */
export interface TenantQuota {
  sandboxes: number;
  memoryMb: number;
  diskMb: number;
}

/** What a tenant's sandboxes add up to now, in the quota's terms. */
export interface TenantUsage {
  sandboxes: number;
  memoryMb: number;
  diskMb: number;
}

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

export interface CwdRecord {
  cwd: string;
  backend: string;
}

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
}

/** An audit row as an `AuditEntry`. */
const AUDIT_COLUMNS = `time_ms AS timeMs, tenant, profile, user, session, sandbox_key AS sandboxKey, kind,
  command, exit_code AS exitCode, duration_ms AS durationMs`;

const SCHEMA = `
CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS leases (name TEXT PRIMARY KEY, owner TEXT NOT NULL, taken_ms INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS sandboxes (
  digest TEXT PRIMARY KEY, backend TEXT NOT NULL, tenant TEXT NOT NULL, profile TEXT,
  key TEXT NOT NULL, rule TEXT NOT NULL, ephemeral INTEGER NOT NULL, ref TEXT NOT NULL,
  name TEXT NOT NULL, host_dir TEXT, mount TEXT, created_ms INTEGER NOT NULL, last_used_ms INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS sessions (
  tenant TEXT NOT NULL, profile TEXT NOT NULL, session TEXT NOT NULL, opened_ms INTEGER NOT NULL,
  closed_ms INTEGER, last_seen_ms INTEGER NOT NULL, owner TEXT,
  PRIMARY KEY (tenant, profile, session));
CREATE TABLE IF NOT EXISTS session_sandboxes (
  tenant TEXT NOT NULL, profile TEXT NOT NULL, session TEXT NOT NULL, digest TEXT NOT NULL,
  PRIMARY KEY (tenant, profile, session, digest));
CREATE INDEX IF NOT EXISTS session_sandboxes_digest ON session_sandboxes (digest);
CREATE TABLE IF NOT EXISTS cwd_records (
  shell TEXT PRIMARY KEY, tenant TEXT NOT NULL, profile TEXT NOT NULL, session TEXT,
  cwd TEXT NOT NULL, backend TEXT NOT NULL, updated_ms INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS aliases (
  tenant TEXT NOT NULL, profile TEXT NOT NULL, child TEXT NOT NULL, parent TEXT NOT NULL, session TEXT,
  PRIMARY KEY (tenant, profile, child));
CREATE TABLE IF NOT EXISTS task_overrides (
  tenant TEXT NOT NULL, profile TEXT NOT NULL, task TEXT NOT NULL, override TEXT NOT NULL, session TEXT,
  PRIMARY KEY (tenant, profile, task));
CREATE TABLE IF NOT EXISTS audit (
  id INTEGER PRIMARY KEY AUTOINCREMENT, time_ms INTEGER NOT NULL, tenant TEXT NOT NULL, profile TEXT NOT NULL,
  user TEXT, session TEXT, sandbox_key TEXT, kind TEXT NOT NULL, command TEXT, exit_code INTEGER, duration_ms INTEGER);
CREATE INDEX IF NOT EXISTS audit_time ON audit (time_ms);
CREATE TABLE IF NOT EXISTS jobs (
  id TEXT PRIMARY KEY, tenant TEXT NOT NULL, profile TEXT NOT NULL, session TEXT NOT NULL, user TEXT, digest TEXT NOT NULL,
  sandbox_key TEXT NOT NULL, scope TEXT NOT NULL, command TEXT NOT NULL, dir TEXT NOT NULL, started_ms INTEGER NOT NULL,
  status TEXT NOT NULL, exit_code INTEGER, ended_ms INTEGER);
CREATE INDEX IF NOT EXISTS jobs_session ON jobs (tenant, profile, session);
CREATE INDEX IF NOT EXISTS jobs_digest ON jobs (digest, status);
`;

interface SandboxRow {
  digest: string; backend: string; tenant: string; profile: string | null; key: string; rule: string;
  ephemeral: number; ref: string; name: string; host_dir: string | null; mount: string | null;
  created_ms: number; last_used_ms: number; claim_owner?: string | null; memory_mb?: number | null; disk_mb?: number | null;
}

/** A background job (issue 5): its output lives in the sandbox under `dir`; this is its index entry. */
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
 * (so an old job stays its own user's). Under an immediate transaction: concurrent openers add it once.
 */
function migrateJobs(db: Database.Database): void {
  const hasUser = () => (db.prepare('PRAGMA table_info(jobs)').all() as Array<{ name: string }>).some((c) => c.name === 'user');
  if (hasUser()) return;
  db.transaction(() => {
    if (hasUser()) return;
    db.exec('ALTER TABLE jobs ADD COLUMN user TEXT');
    // A scope that does not parse gets '', which no caller has (scopes drop empty strings): not found for all.
    db.exec("UPDATE jobs SET user = CASE WHEN json_valid(scope) THEN json_extract(scope, '$.user') ELSE '' END");
  }).immediate();
}

/**
 * Columns added to `sandboxes` after its first version, for stores made before them: the claim's
 * process (null: a claim judged by age) and what a sandbox reserves (null: not counted).
 */
function migrateSandboxColumns(db: Database.Database): void {
  const added = [['claim_owner', 'TEXT'], ['memory_mb', 'INTEGER'], ['disk_mb', 'INTEGER']] as const;
  const missing = () => {
    const have = new Set((db.prepare('PRAGMA table_info(sandboxes)').all() as Array<{ name: string }>).map((c) => c.name));
    return added.filter(([name]) => !have.has(name));
  };
  if (missing().length === 0) return;
  db.transaction(() => {
    for (const [name, type] of missing()) db.exec(`ALTER TABLE sandboxes ADD COLUMN ${name} ${type}`);
  }).immediate();
}

function toSandbox(r: SandboxRow): SandboxRecord {
  return {
    digest: r.digest, backend: r.backend, tenant: r.tenant, profile: r.profile, key: r.key, rule: r.rule,
    ephemeral: r.ephemeral === 1, ref: r.ref, name: r.name, hostDir: r.host_dir, mount: r.mount,
    createdMs: r.created_ms, lastUsedMs: r.last_used_ms, claimOwner: r.claim_owner ?? null,
    memoryMb: r.memory_mb ?? null, diskMb: r.disk_mb ?? null,
  };
}

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

export interface StateStoreOptions {
  /**
   * `audit.maxCommandChars`: a recorded command text longer than this is cut, the cut marked
   * (`… [N more chars]`). Texts arrive redacted. Default: not cut (the broker always passes it).
   */
  auditMaxCommandChars?: number | undefined;
}

/**
 * berth's state under `BERTH_HOME/state.db`: what this installation owns, so a restarted berth
 * can reattach and reap. Every query is scoped by tenant where a tenant is involved.
 */
export class StateStore {
  readonly installationId: string;
  private readonly db: Database.Database;
  private readonly statements = new Map<string, Database.Statement>();
  private auditQueue: AuditEntry[] = [];
  private auditTimer: NodeJS.Timeout | undefined;
  private readonly auditMaxCommandChars: number;

  private constructor(db: Database.Database, opts: StateStoreOptions) {
    this.db = db;
    this.auditMaxCommandChars = opts.auditMaxCommandChars ?? Number.POSITIVE_INFINITY;
    const row = db.prepare('SELECT v FROM meta WHERE k = ?').get('installation') as { v: string } | undefined;
    if (row) {
      this.installationId = row.v;
    } else {
      const id = randomUUID();
      db.prepare('INSERT OR IGNORE INTO meta (k, v) VALUES (?, ?)').run('installation', id);
      // Another process may have won the race: read back what is stored.
      this.installationId = (db.prepare('SELECT v FROM meta WHERE k = ?').get('installation') as { v: string }).v;
    }
  }

  /** Opens (creating if needed) the store in `berthHome`; berth's files there are made private. */
  static open(berthHome: string, opts: StateStoreOptions = {}): StateStore {
    const db = openStateDb(berthHome);
    db.exec(SCHEMA);
    migrateJobs(db);
    migrateSandboxColumns(db);
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

  close(): void {
    if (!this.db.open) return;
    this.flushAudit();
    this.db.close();
  }

  /** Prepared once per SQL text: preparing costs more than running these small queries. */
  private q(sql: string): Database.Statement {
    let st = this.statements.get(sql);
    if (st === undefined) {
      st = this.db.prepare(sql);
      this.statements.set(sql, st);
    }
    return st;
  }

  // --- sandboxes -------------------------------------------------------------------------

  getSandbox(digest: string): SandboxRecord | undefined {
    const row = this.q('SELECT * FROM sandboxes WHERE digest = ?').get(digest) as SandboxRow | undefined;
    return row ? toSandbox(row) : undefined;
  }

  putSandbox(r: SandboxRecord): void {
    this.q(`INSERT INTO sandboxes (digest, backend, tenant, profile, key, rule, ephemeral, ref, name, host_dir, mount, created_ms, last_used_ms)
      VALUES (@digest, @backend, @tenant, @profile, @key, @rule, @ephemeral, @ref, @name, @hostDir, @mount, @createdMs, @lastUsedMs)
      ON CONFLICT (digest) DO UPDATE SET ref = excluded.ref, name = excluded.name, host_dir = excluded.host_dir,
        mount = excluded.mount, rule = excluded.rule, last_used_ms = excluded.last_used_ms`)
      .run({ ...r, ephemeral: r.ephemeral ? 1 : 0 });
  }

  /**
   * Claims the creation of a sandbox across processes: inserts `r` (whose `ref` is '') only if no
   * record exists and, with a quota, only if its tenant stays within it with `r` counted. One
   * statement, so concurrent claims of any process cannot together pass the quota. `claimed`:
   * this call made the claim (others wait for the claimant's ref); `taken`: a record exists;
   * `over`: the tenant is at its quota.
   */
  claimSandbox(r: SandboxRecord, quota?: TenantQuota): 'claimed' | 'taken' | 'over' {
    const within = quota === undefined ? '' : `AND (SELECT count(*) FROM sandboxes WHERE tenant = @tenant) < @maxSandboxes
      AND (SELECT coalesce(sum(memory_mb), 0) FROM sandboxes WHERE tenant = @tenant) + coalesce(@memoryMb, 0) <= @maxMemoryMb
      AND (SELECT coalesce(sum(disk_mb), 0) FROM sandboxes WHERE tenant = @tenant) + coalesce(@diskMb, 0) <= @maxDiskMb`;
    const info = this.q(`INSERT INTO sandboxes (digest, backend, tenant, profile, key, rule, ephemeral, ref, name, host_dir, mount, created_ms, last_used_ms, claim_owner, memory_mb, disk_mb)
      SELECT @digest, @backend, @tenant, @profile, @key, @rule, @ephemeral, @ref, @name, @hostDir, @mount, @createdMs, @lastUsedMs, @claimOwner, @memoryMb, @diskMb
      WHERE NOT EXISTS (SELECT 1 FROM sandboxes WHERE digest = @digest) ${within}
      ON CONFLICT (digest) DO NOTHING`).run({
      ...r, ephemeral: r.ephemeral ? 1 : 0, claimOwner: r.claimOwner ?? null, memoryMb: r.memoryMb ?? null, diskMb: r.diskMb ?? null,
      ...(quota === undefined ? {} : { maxSandboxes: quota.sandboxes, maxMemoryMb: quota.memoryMb, maxDiskMb: quota.diskMb }),
    });
    if (info.changes === 1) return 'claimed';
    return this.getSandbox(r.digest) === undefined ? 'over' : 'taken';
  }

  /** What each tenant's sandboxes (or one tenant's) add up to: how many, and what they reserve. */
  tenantUsage(tenant?: string): Map<string, TenantUsage> {
    const rows = this.q(`SELECT tenant, count(*) AS sandboxes, coalesce(sum(memory_mb), 0) AS memoryMb, coalesce(sum(disk_mb), 0) AS diskMb
      FROM sandboxes WHERE @tenant IS NULL OR tenant = @tenant GROUP BY tenant ORDER BY tenant`).all({ tenant: tenant ?? null }) as Array<TenantUsage & { tenant: string }>;
    return new Map(rows.map(({ tenant: t, ...u }) => [t, u]));
  }

  /** Takes over a claim whose creator never recorded a ref (it crashed); true for exactly one caller. */
  takeOverClaim(digest: string, claimedMs: number, nowMs: number, owner: string): boolean {
    return this.q("UPDATE sandboxes SET created_ms = ?, claim_owner = ? WHERE digest = ? AND ref = '' AND created_ms = ?")
      .run(nowMs, owner, digest, claimedMs).changes === 1;
  }

  touchSandbox(digest: string, nowMs: number): void {
    this.q('UPDATE sandboxes SET last_used_ms = ? WHERE digest = ?').run(nowMs, digest);
  }

  deleteSandbox(digest: string): void {
    this.db.transaction(() => {
      this.q('DELETE FROM sandboxes WHERE digest = ?').run(digest);
      this.q('DELETE FROM session_sandboxes WHERE digest = ?').run(digest);
    })();
  }

  /** Sandboxes of one tenant, or of all tenants when `tenant` is undefined (reapers only). */
  listSandboxes(tenant?: string): SandboxRecord[] {
    const rows = tenant === undefined
      ? this.q('SELECT * FROM sandboxes ORDER BY created_ms').all()
      : this.q('SELECT * FROM sandboxes WHERE tenant = ? ORDER BY created_ms').all(tenant);
    return (rows as SandboxRow[]).map(toSandbox);
  }

  // --- leases (engine objects several processes may create, e.g. tenant networks) ---------

  /**
   * Takes the named lease for `owner` when it is free, or held by an owner `isDead` says is gone
   * (that holder is replaced in one compare-and-swap). True for exactly one of racing callers.
   */
  takeLease(name: string, owner: string, nowMs: number, isDead: (holder: string) => boolean): boolean {
    if (this.q('INSERT INTO leases (name, owner, taken_ms) VALUES (?, ?, ?) ON CONFLICT (name) DO NOTHING').run(name, owner, nowMs).changes === 1) return true;
    const holder = (this.q('SELECT owner FROM leases WHERE name = ?').get(name) as { owner: string } | undefined)?.owner;
    if (holder === undefined || !isDead(holder)) return false;
    return this.q('UPDATE leases SET owner = ?, taken_ms = ? WHERE name = ? AND owner = ?').run(owner, nowMs, name, holder).changes === 1;
  }

  releaseLease(name: string, owner: string): void {
    this.q('DELETE FROM leases WHERE name = ? AND owner = ?').run(name, owner);
  }

  // --- sessions --------------------------------------------------------------------------

  /** Opens (or re-opens) a session and links it to a sandbox. */
  openSession(tenant: string, profile: string, session: string, digest: string, owner: string | null, nowMs: number): void {
    this.db.transaction(() => {
      this.q(`INSERT INTO sessions (tenant, profile, session, opened_ms, closed_ms, last_seen_ms, owner)
        VALUES (?, ?, ?, ?, NULL, ?, ?)
        ON CONFLICT (tenant, profile, session) DO UPDATE SET
          opened_ms = CASE WHEN closed_ms IS NULL THEN opened_ms ELSE excluded.opened_ms END,
          closed_ms = NULL, last_seen_ms = excluded.last_seen_ms, owner = excluded.owner`)
        .run(tenant, profile, session, nowMs, nowMs, owner);
      this.q('INSERT OR IGNORE INTO session_sandboxes (tenant, profile, session, digest) VALUES (?, ?, ?, ?)')
        .run(tenant, profile, session, digest);
    })();
  }

  touchSession(tenant: string, profile: string, session: string, nowMs: number): void {
    this.q('UPDATE sessions SET last_seen_ms = ? WHERE tenant = ? AND profile = ? AND session = ?')
      .run(nowMs, tenant, profile, session);
  }

  getSession(tenant: string, profile: string, session: string): SessionRecord | undefined {
    const row = this.q('SELECT * FROM sessions WHERE tenant = ? AND profile = ? AND session = ?')
      .get(tenant, profile, session) as SessionRow | undefined;
    return row ? toSession(row) : undefined;
  }

  /** Releases ownership of the sessions a process held (they stay open, detached). */
  releaseSessions(owner: string): void {
    this.q('UPDATE sessions SET owner = NULL WHERE owner = ?').run(owner);
  }

  /** Marks a session closed and forgets its cwd records, aliases and task overrides. */
  closeSession(tenant: string, profile: string, session: string, nowMs: number): string[] {
    return this.db.transaction(() => {
      this.q('UPDATE sessions SET closed_ms = ?, owner = NULL WHERE tenant = ? AND profile = ? AND session = ?')
        .run(nowMs, tenant, profile, session);
      this.q('DELETE FROM cwd_records WHERE tenant = ? AND profile = ? AND session = ?').run(tenant, profile, session);
      this.q('DELETE FROM aliases WHERE tenant = ? AND profile = ? AND session = ?').run(tenant, profile, session);
      this.q('DELETE FROM task_overrides WHERE tenant = ? AND profile = ? AND session = ?').run(tenant, profile, session);
      const digests = this.q('SELECT digest FROM session_sandboxes WHERE tenant = ? AND profile = ? AND session = ?')
        .all(tenant, profile, session) as { digest: string }[];
      this.q('DELETE FROM session_sandboxes WHERE tenant = ? AND profile = ? AND session = ?').run(tenant, profile, session);
      return digests.map((d) => d.digest);
    })();
  }

  /** How many sandboxes a session is linked to. */
  sandboxCountOf(tenant: string, profile: string, session: string): number {
    return (this.q('SELECT COUNT(*) AS n FROM session_sandboxes WHERE tenant = ? AND profile = ? AND session = ?')
      .get(tenant, profile, session) as { n: number }).n;
  }

  /** Sessions linked to a sandbox (open or not). */
  sessionsOf(digest: string): SessionRecord[] {
    const rows = this.q(`SELECT s.* FROM sessions s JOIN session_sandboxes l
      ON s.tenant = l.tenant AND s.profile = l.profile AND s.session = l.session WHERE l.digest = ?`).all(digest);
    return (rows as SessionRow[]).map(toSession);
  }

  listSessions(tenant?: string): SessionRecord[] {
    const rows = tenant === undefined
      ? this.q('SELECT * FROM sessions').all()
      : this.q('SELECT * FROM sessions WHERE tenant = ?').all(tenant);
    return (rows as SessionRow[]).map(toSession);
  }

  // --- cwd records -----------------------------------------------------------------------

  getCwd(shell: string): CwdRecord | undefined {
    return this.q('SELECT cwd, backend FROM cwd_records WHERE shell = ?').get(shell) as CwdRecord | undefined;
  }

  putCwd(shell: string, r: { tenant: string; profile: string; session: string | null; cwd: string; backend: string }, nowMs: number): void {
    this.q(`INSERT INTO cwd_records (shell, tenant, profile, session, cwd, backend, updated_ms) VALUES (?, ?, ?, ?, ?, ?, ?)
      ON CONFLICT (shell) DO UPDATE SET cwd = excluded.cwd, backend = excluded.backend, updated_ms = excluded.updated_ms`)
      .run(shell, r.tenant, r.profile, r.session, r.cwd, r.backend, nowMs);
  }

  // --- aliases and task overrides -------------------------------------------------------

  getAliasParent(tenant: string, profile: string, child: string): string | undefined {
    const row = this.q('SELECT parent FROM aliases WHERE tenant = ? AND profile = ? AND child = ?')
      .get(tenant, profile, child) as { parent: string } | undefined;
    return row?.parent;
  }

  /** Subagents registered directly under `parent`, with the session each was registered in (null: none). */
  childrenOf(tenant: string, profile: string, parent: string): { child: string; session: string | null }[] {
    return this.q('SELECT child, session FROM aliases WHERE tenant = ? AND profile = ? AND parent = ? ORDER BY child')
      .all(tenant, profile, parent) as { child: string; session: string | null }[];
  }

  /** Tasks registered as subagents in a session. */
  tasksOfSession(tenant: string, profile: string, session: string): string[] {
    return (this.q('SELECT child FROM aliases WHERE tenant = ? AND profile = ? AND session = ? ORDER BY child')
      .all(tenant, profile, session) as { child: string }[]).map((r) => r.child);
  }

  putAlias(tenant: string, profile: string, child: string, parent: string, session: string | null): void {
    this.q(`INSERT INTO aliases (tenant, profile, child, parent, session) VALUES (?, ?, ?, ?, ?)
      ON CONFLICT (tenant, profile, child) DO UPDATE SET parent = excluded.parent, session = excluded.session`)
      .run(tenant, profile, child, parent, session);
  }

  getTaskOverride(tenant: string, profile: string, task: string): unknown {
    const row = this.q('SELECT override FROM task_overrides WHERE tenant = ? AND profile = ? AND task = ?')
      .get(tenant, profile, task) as { override: string } | undefined;
    return row ? JSON.parse(row.override) : undefined;
  }

  putTaskOverride(tenant: string, profile: string, task: string, override: unknown, session: string | null): void {
    this.q(`INSERT INTO task_overrides (tenant, profile, task, override, session) VALUES (?, ?, ?, ?, ?)
      ON CONFLICT (tenant, profile, task) DO UPDATE SET override = excluded.override, session = excluded.session`)
      .run(tenant, profile, task, JSON.stringify(override), session);
  }

  // --- audit -----------------------------------------------------------------------------

  /**
   * Queues an audit entry; entries are written in one transaction within 50 ms (and at close, and
   * before any read), so recording a call costs the hot path no disk write of its own.
   */
  addAudit(e: AuditEntry): void {
    const command = e.command === null ? null : capAuditText(e.command, this.auditMaxCommandChars);
    this.auditQueue.push(command === e.command ? e : { ...e, command });
    if (this.auditQueue.length >= 200) this.flushAudit();
    else if (this.auditTimer === undefined) {
      this.auditTimer = setTimeout(() => this.flushAudit(), 50);
      this.auditTimer.unref();
    }
  }

  flushAudit(): void {
    if (this.auditTimer !== undefined) clearTimeout(this.auditTimer);
    this.auditTimer = undefined;
    const batch = this.auditQueue;
    if (batch.length === 0 || !this.db.open) return;
    this.auditQueue = [];
    const insert = this.q(`INSERT INTO audit (time_ms, tenant, profile, user, session, sandbox_key, kind, command, exit_code, duration_ms)
      VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`);
    this.db.transaction(() => {
      for (const e of batch) {
        insert.run(e.timeMs, e.tenant, e.profile, e.user, e.session, e.sandboxKey, e.kind, e.command, e.exitCode, e.durationMs);
      }
    })();
  }

  /**
   * `audit.retentionDays`: deletes entries recorded before `beforeMs` (queued ones are newer).
   * Returns how many went.
   */
  pruneAudit(beforeMs: number): number {
    if (!this.db.open) return 0;
    return this.q('DELETE FROM audit WHERE time_ms < ?').run(beforeMs).changes;
  }

  listAudit(filter: { tenant: string; profiles?: readonly string[]; user?: string; session?: string; limit?: number }): AuditEntry[] {
    this.flushAudit();
    const where = ['tenant = @tenant'];
    if (filter.profiles !== undefined) where.push('profile IN (SELECT value FROM json_each(@profiles))');
    if (filter.user !== undefined) where.push('user = @user');
    if (filter.session !== undefined) where.push('session = @session');
    const rows = this.q(`SELECT ${AUDIT_COLUMNS} FROM audit WHERE ${where.join(' AND ')} ORDER BY id DESC LIMIT @limit`).all({ ...filter, profiles: JSON.stringify(filter.profiles ?? []), limit: filter.limit ?? 100 });
    return rows as AuditEntry[];
  }

  /** The latest entries of every tenant, newest first: the operator's view (`berth top`), never a tenant's. */
  recentAudit(limit: number): AuditEntry[] {
    this.flushAudit();
    return this.q(`SELECT ${AUDIT_COLUMNS} FROM audit ORDER BY id DESC LIMIT ?`).all(limit) as AuditEntry[];
  }

  // --- background jobs (issue 5) ---------------------------------------------------------

  putJob(j: JobRecord): void {
    this.q(`INSERT INTO jobs (id, tenant, profile, session, user, digest, sandbox_key, scope, command, dir, started_ms, status, exit_code, ended_ms)
      VALUES (@id, @tenant, @profile, @session, @user, @digest, @sandboxKey, @scope, @command, @dir, @startedMs, @status, @exitCode, @endedMs)`).run(j);
  }

  /**
   * One job of one tenant's session and end user (`null`: a call with no user): an id from another
   * tenant, session or user is not found. `user IS ?` matches null to null only.
   */
  getJob(tenant: string, profile: string, session: string, user: string | null, id: string): JobRecord | undefined {
    const row = this.q('SELECT * FROM jobs WHERE id = ? AND tenant = ? AND profile = ? AND session = ? AND user IS ?')
      .get(id, tenant, profile, session, user) as JobRow | undefined;
    return row ? toJob(row) : undefined;
  }

  /** The jobs of one session started by one end user (`null`: calls with no user), oldest first. */
  listJobs(tenant: string, profile: string, session: string, user: string | null): JobRecord[] {
    const rows = this.q('SELECT * FROM jobs WHERE tenant = ? AND profile = ? AND session = ? AND user IS ? ORDER BY started_ms, id')
      .all(tenant, profile, session, user) as JobRow[];
    return rows.map(toJob);
  }

  /** A tenant's latest jobs of the given profiles, newest first (the dashboard's view). */
  listTenantJobs(tenant: string, profiles: readonly string[], limit: number): JobRecord[] {
    const rows = this.q(`SELECT * FROM jobs WHERE tenant = ? AND profile IN (SELECT value FROM json_each(?))
      ORDER BY started_ms DESC, id DESC LIMIT ?`).all(tenant, JSON.stringify(profiles), limit) as JobRow[];
    return rows.map(toJob);
  }

  /** Jobs last known to be running in a sandbox (any tenant: the idle reaper asks per sandbox). */
  runningJobsIn(digest: string): JobRecord[] {
    return (this.q("SELECT * FROM jobs WHERE digest = ? AND status = 'running'").all(digest) as JobRow[]).map(toJob);
  }

  /** Records a job's end; only a running job changes (the first observed end wins). */
  endJob(id: string, status: 'exited' | 'killed' | 'unknown', exitCode: number | null, nowMs: number): void {
    this.q("UPDATE jobs SET status = ?, exit_code = ?, ended_ms = ? WHERE id = ? AND status = 'running'")
      .run(status, exitCode, nowMs, id);
  }

  deleteJob(id: string): void {
    this.q('DELETE FROM jobs WHERE id = ?').run(id);
  }
}
