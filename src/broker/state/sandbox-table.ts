import type Database from 'better-sqlite3';
import type { Statements } from './statements.js';
import { StampQueue, stampParams, stampsBack, stampSql } from './write-queue.js';

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
  /** When it was hibernated (stopped with its files and shells' state kept); null while it runs. */
  hibernatedMs?: number | null;
  /**
   * The process that last brought it up (`pid:starttime`): while that process lives, only it
   * hibernates the sandbox (it may be running a command there); once it is gone, any long-lived one.
   */
  heldBy?: string | null;
  /**
   * The process replacing it now (a restore, `pid:starttime`): until it records the new sandbox's
   * ref, the orphan reaper leaves the identity's engine objects alone while that process lives.
   */
  replacedBy?: string | null;
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

export const SANDBOX_SCHEMA = `
CREATE TABLE IF NOT EXISTS sandboxes (
  digest TEXT PRIMARY KEY, backend TEXT NOT NULL, tenant TEXT NOT NULL, profile TEXT,
  key TEXT NOT NULL, rule TEXT NOT NULL, ephemeral INTEGER NOT NULL, ref TEXT NOT NULL,
  name TEXT NOT NULL, host_dir TEXT, mount TEXT, created_ms INTEGER NOT NULL, last_used_ms INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS sandbox_holders (digest TEXT NOT NULL, owner TEXT NOT NULL, PRIMARY KEY (digest, owner));
CREATE TABLE IF NOT EXISTS reaped_sandboxes (digest TEXT PRIMARY KEY, reaped_ms INTEGER NOT NULL);
`;

interface SandboxRow {
  digest: string; backend: string; tenant: string; profile: string | null; key: string; rule: string;
  ephemeral: number; ref: string; name: string; host_dir: string | null; mount: string | null;
  created_ms: number; last_used_ms: number; claim_owner?: string | null; memory_mb?: number | null; disk_mb?: number | null;
  hibernated_ms?: number | null; held_by?: string | null; replaced_by?: string | null;
}

function toSandbox(r: SandboxRow): SandboxRecord {
  return {
    digest: r.digest, backend: r.backend, tenant: r.tenant, profile: r.profile, key: r.key, rule: r.rule,
    ephemeral: r.ephemeral === 1, ref: r.ref, name: r.name, hostDir: r.host_dir, mount: r.mount,
    createdMs: r.created_ms, lastUsedMs: r.last_used_ms, claimOwner: r.claim_owner ?? null,
    memoryMb: r.memory_mb ?? null, diskMb: r.disk_mb ?? null, hibernatedMs: r.hibernated_ms ?? null, heldBy: r.held_by ?? null,
    replacedBy: r.replaced_by ?? null,
  };
}

/**
 * Columns added to `sandboxes` after its first version, for stores made before them: the claim's
 * process (null: a claim judged by age), what a sandbox reserves (null: not counted), when it was
 * hibernated and which process last brought it up (null: running, or not known), which process
 * replaces it now (null: none).
 */
export function migrateSandboxColumns(db: Database.Database): void {
  const added = [['claim_owner', 'TEXT'], ['memory_mb', 'INTEGER'], ['disk_mb', 'INTEGER'], ['hibernated_ms', 'INTEGER'], ['held_by', 'TEXT'], ['replaced_by', 'TEXT']] as const;
  const missing = () => {
    const have = new Set((db.prepare('PRAGMA table_info(sandboxes)').all() as Array<{ name: string }>).map((c) => c.name));
    return added.filter(([name]) => !have.has(name));
  };
  if (missing().length === 0) return;
  db.transaction(() => {
    for (const [name, type] of missing()) db.exec(`ALTER TABLE sandboxes ADD COLUMN ${name} ${type}`);
  }).immediate();
}

/** The sandboxes of this installation and the creation claims on them. Scoped by tenant where a tenant is involved. */
export class SandboxTable {
  /** `touch`es not yet written; see `touch`. */
  private readonly touches: StampQueue<[...stamp: ReturnType<typeof stampParams>, digest: string]>;

  constructor(private readonly sql: Statements) {
    this.touches = new StampQueue(sql, `UPDATE sandboxes SET last_used_ms = ${stampSql('last_used_ms')} WHERE digest = ?`);
  }

  get(digest: string): SandboxRecord | undefined {
    const row = this.sql.q('SELECT * FROM sandboxes WHERE digest = ?').get(digest) as SandboxRow | undefined;
    return row ? toSandbox(row) : undefined;
  }

  /** Records a sandbox brought up (created, adopted or resumed): running, held by `r.heldBy`. */
  put(r: SandboxRecord): void {
    this.sql.q(`INSERT INTO sandboxes (digest, backend, tenant, profile, key, rule, ephemeral, ref, name, host_dir, mount, created_ms, last_used_ms, held_by)
      VALUES (@digest, @backend, @tenant, @profile, @key, @rule, @ephemeral, @ref, @name, @hostDir, @mount, @createdMs, @lastUsedMs, @heldBy)
      ON CONFLICT (digest) DO UPDATE SET ref = excluded.ref, name = excluded.name, host_dir = excluded.host_dir,
        mount = excluded.mount, rule = excluded.rule, last_used_ms = excluded.last_used_ms, held_by = excluded.held_by, hibernated_ms = NULL, replaced_by = NULL`)
      .run({ ...r, ephemeral: r.ephemeral ? 1 : 0, heldBy: r.heldBy ?? null });
  }

  /** Process `owner` (`pid:starttime`) holds the sandbox live now: it may run commands in it until it lets go. */
  hold(digest: string, owner: string): void {
    this.sql.q('INSERT INTO sandbox_holders (digest, owner) VALUES (?, ?) ON CONFLICT DO NOTHING').run(digest, owner);
  }

  /** Process `owner` no longer holds the sandbox. */
  release(digest: string, owner: string): void {
    this.sql.q('DELETE FROM sandbox_holders WHERE digest = ? AND owner = ?').run(digest, owner);
  }

  /** The processes that hold the sandbox live (a crashed one stays listed until the sweep prunes it: ask `ownerAlive`). */
  holders(digest: string): string[] {
    return (this.sql.q('SELECT owner FROM sandbox_holders WHERE digest = ?').all(digest) as Array<{ owner: string }>).map((r) => r.owner);
  }

  /**
   * Removes the holder rows of processes `dead` says ended (a crashed berth never released its
   * own); the number removed.
   */
  pruneHolders(dead: (owner: string) => boolean): number {
    const owners = (this.sql.q('SELECT DISTINCT owner FROM sandbox_holders').all() as Array<{ owner: string }>).map((r) => r.owner);
    let removed = 0;
    for (const owner of owners.filter(dead)) removed += this.sql.q('DELETE FROM sandbox_holders WHERE owner = ?').run(owner).changes;
    return removed;
  }

  /** Marks a recorded sandbox as being replaced by process `owner` (a restore), or no longer (null); `put` clears it too. */
  markReplacing(digest: string, owner: string | null): void {
    this.sql.q('UPDATE sandboxes SET replaced_by = ? WHERE digest = ?').run(owner, digest);
  }

  /**
   * Marks a sandbox hibernated (its ref unchanged: the next call resumes it), only while its record
   * still names `ref`, the sandbox that was stopped: a restore or recreate that recorded another
   * meanwhile keeps its record as it is. False: the record no longer names `ref` (or is gone).
   */
  markHibernated(digest: string, ref: string, nowMs: number): boolean {
    return this.sql.q('UPDATE sandboxes SET hibernated_ms = ? WHERE digest = ? AND ref = ?').run(nowMs, digest, ref).changes === 1;
  }

  /**
   * Claims the creation of a sandbox across processes: inserts `r` (whose `ref` is '') only if no
   * record exists and, with a quota, only if its tenant stays within it with `r` counted. One
   * statement, so concurrent claims of any process cannot together pass the quota. `claimed`:
   * this call made the claim (others wait for the claimant's ref); `taken`: a record exists;
   * `over`: the tenant is at its quota.
   */
  claim(r: SandboxRecord, quota?: TenantQuota): 'claimed' | 'taken' | 'over' {
    const within = quota === undefined ? '' : `AND (SELECT count(*) FROM sandboxes WHERE tenant = @tenant) < @maxSandboxes
      AND (SELECT coalesce(sum(memory_mb), 0) FROM sandboxes WHERE tenant = @tenant) + coalesce(@memoryMb, 0) <= @maxMemoryMb
      AND (SELECT coalesce(sum(disk_mb), 0) FROM sandboxes WHERE tenant = @tenant) + coalesce(@diskMb, 0) <= @maxDiskMb`;
    const info = this.sql.q(`INSERT INTO sandboxes (digest, backend, tenant, profile, key, rule, ephemeral, ref, name, host_dir, mount, created_ms, last_used_ms, claim_owner, memory_mb, disk_mb)
      SELECT @digest, @backend, @tenant, @profile, @key, @rule, @ephemeral, @ref, @name, @hostDir, @mount, @createdMs, @lastUsedMs, @claimOwner, @memoryMb, @diskMb
      WHERE NOT EXISTS (SELECT 1 FROM sandboxes WHERE digest = @digest) ${within}
      ON CONFLICT (digest) DO NOTHING`).run({
      ...r, ephemeral: r.ephemeral ? 1 : 0, claimOwner: r.claimOwner ?? null, memoryMb: r.memoryMb ?? null, diskMb: r.diskMb ?? null,
      ...(quota === undefined ? {} : { maxSandboxes: quota.sandboxes, maxMemoryMb: quota.memoryMb, maxDiskMb: quota.diskMb }),
    });
    if (info.changes === 1) return 'claimed';
    return this.get(r.digest) === undefined ? 'over' : 'taken';
  }

  /** What each tenant's sandboxes (or one tenant's) add up to: how many, and what they reserve. */
  tenantUsage(tenant?: string): Map<string, TenantUsage> {
    const rows = this.sql.q(`SELECT tenant, count(*) AS sandboxes, coalesce(sum(memory_mb), 0) AS memoryMb, coalesce(sum(disk_mb), 0) AS diskMb
      FROM sandboxes WHERE @tenant IS NULL OR tenant = @tenant GROUP BY tenant ORDER BY tenant`).all({ tenant: tenant ?? null }) as Array<TenantUsage & { tenant: string }>;
    return new Map(rows.map(({ tenant: t, ...u }) => [t, u]));
  }

  /** Takes over a claim whose creator never recorded a ref (it crashed); true for exactly one caller. */
  takeOverClaim(digest: string, claimedMs: number, nowMs: number, owner: string): boolean {
    return this.sql.q("UPDATE sandboxes SET created_ms = ?, claim_owner = ? WHERE digest = ? AND ref = '' AND created_ms = ?")
      .run(nowMs, owner, digest, claimedMs).changes === 1;
  }

  /**
   * Moves a sandbox's `last_used_ms` forward to `nowMs`, within the write queue's delay (one
   * transaction for many; `flushTouches` at close). Never moves it back: a record written meanwhile
   * (a bring-up, a hibernation) keeps a newer time; but for one more than STAMP_AHEAD_MS ahead,
   * from before the wall clock stepped back, which would keep it from going idle until the clock
   * caught up.
   */
  touch(digest: string, nowMs: number): void {
    this.touches.add(...stampParams(nowMs), digest);
  }

  /** Sets every `last_used_ms` more than STAMP_AHEAD_MS ahead of `nowMs` (the wall clock stepped back since) to `nowMs`. */
  stampsBack(nowMs: number): void {
    stampsBack(this.sql, 'sandboxes', 'last_used_ms', nowMs);
  }

  /** Writes the queued touches now. */
  flushTouches(): void {
    this.touches.flush();
  }

  /**
   * Remembers that a reaper removed this identity's sandbox while a session using it was still
   * open (its holder died, or it idled out): the sandbox made next for it is reported as
   * recreated (`takeReaped`), never handed over as if it were the old one.
   */
  markReaped(digest: string, nowMs: number): void {
    this.sql.q('INSERT OR REPLACE INTO reaped_sandboxes (digest, reaped_ms) VALUES (?, ?)').run(digest, nowMs);
  }

  /** Whether a reaper removed this identity's sandbox from an open session (see `markReaped`); forgets it. */
  takeReaped(digest: string): boolean {
    return this.sql.q('DELETE FROM reaped_sandboxes WHERE digest = ?').run(digest).changes === 1;
  }

  /** Forgets reaped marks older than `beforeMs` (a session that never came back). */
  pruneReaped(beforeMs: number): void {
    this.sql.q('DELETE FROM reaped_sandboxes WHERE reaped_ms < ?').run(beforeMs);
  }

  /** Forgets a sandbox and which sessions used it. */
  delete(digest: string): void {
    this.sql.db.transaction(() => {
      this.sql.q('DELETE FROM sandboxes WHERE digest = ?').run(digest);
      this.sql.q('DELETE FROM session_sandboxes WHERE digest = ?').run(digest);
      this.sql.q('DELETE FROM sandbox_holders WHERE digest = ?').run(digest);
    })();
  }

  /** Sandboxes of one tenant, or of all tenants when `tenant` is undefined (reapers and the operator's views only). */
  list(tenant?: string): SandboxRecord[] {
    const rows = tenant === undefined
      ? this.sql.q('SELECT * FROM sandboxes ORDER BY created_ms').all()
      : this.sql.q('SELECT * FROM sandboxes WHERE tenant = ? ORDER BY created_ms').all(tenant);
    return (rows as SandboxRow[]).map(toSandbox);
  }
}
