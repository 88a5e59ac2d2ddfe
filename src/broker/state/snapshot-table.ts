import type { Statements } from './statements.js';

/**
 * A snapshot of a sandbox as the store keeps it. `named`: made by a caller, listed, restored and
 * forked from by name. `base`: made for a fork from a sandbox's current state, never listed; it
 * stays as the forked sandbox's base (a docker container needs its image) and goes once that
 * sandbox's record is gone. `gone`: a named or base one removed whose storage its backend had to
 * keep (a docker image a fork's container still uses): never listed nor found by name (it is
 * renamed `@gone-<id>`), its bytes still count against its tenant's limit, and the sweep frees it
 * once the backend can.
 */
export interface SnapshotRecord {
  id: string;
  tenant: string;
  user: string | null;
  profile: string;
  session: string | null;
  /** The identity digest and key of the sandbox it was made from. */
  digest: string;
  sandboxKey: string;
  /** Unique per tenant and sandbox; a base snapshot's starts with `@`, which no caller's may. */
  name: string;
  kind: 'named' | 'base' | 'gone';
  /** For a base snapshot: the digest of the sandbox forked from it. */
  baseOf: string | null;
  backend: string;
  /** The backend's reference; '' while it is being made (its row counts against the limits already). */
  ref: string;
  bytes: number;
  createdMs: number;
  /** The cwd recorded for the snapshotting call's shell identity when it was made (restore puts it back). */
  cwd: string | null;
  /** The shell state file stem of that shell identity (a fork copies it to the new shell's). */
  shellStem: string | null;
}

export const SNAPSHOT_SCHEMA = `
CREATE TABLE IF NOT EXISTS snapshots (
  id TEXT PRIMARY KEY, tenant TEXT NOT NULL, user TEXT, profile TEXT NOT NULL, session TEXT, digest TEXT NOT NULL,
  sandbox_key TEXT NOT NULL, name TEXT NOT NULL, kind TEXT NOT NULL, base_of TEXT, backend TEXT NOT NULL, ref TEXT NOT NULL,
  bytes INTEGER NOT NULL, created_ms INTEGER NOT NULL, cwd TEXT, shell_stem TEXT,
  UNIQUE (tenant, digest, name));
CREATE INDEX IF NOT EXISTS snapshots_tenant ON snapshots (tenant, created_ms);
`;

interface SnapshotRow {
  id: string; tenant: string; user: string | null; profile: string; session: string | null; digest: string; sandbox_key: string;
  name: string; kind: string; base_of: string | null; backend: string; ref: string; bytes: number; created_ms: number;
  cwd: string | null; shell_stem: string | null;
}

function toSnapshot(r: SnapshotRow): SnapshotRecord {
  return {
    id: r.id, tenant: r.tenant, user: r.user, profile: r.profile, session: r.session, digest: r.digest, sandboxKey: r.sandbox_key,
    name: r.name, kind: r.kind === 'base' || r.kind === 'gone' ? r.kind : 'named', baseOf: r.base_of, backend: r.backend, ref: r.ref, bytes: r.bytes,
    createdMs: r.created_ms, cwd: r.cwd, shellStem: r.shell_stem,
  };
}

/** A tenant's bounds on its snapshots (`limits.snapshots`, `limits.snapshotBytes`). */
export interface SnapshotQuota {
  count: number;
  bytes: number;
}

/**
 * The snapshots of this installation. Every query a caller's request reaches is scoped by tenant;
 * the unscoped ones (`all`, `pending`) serve the reapers only.
 */
export class SnapshotTable {
  constructor(private readonly sql: Statements) {}

  /**
   * Reserves a snapshot: inserts `r` (ref '') only if its name is free in its sandbox and its
   * tenant holds fewer than `quota.count` snapshots and no more than `quota.bytes`. One statement,
   * so concurrent creates of any process cannot together pass the limit.
   */
  reserve(r: SnapshotRecord, quota: SnapshotQuota): 'reserved' | 'taken' | 'over' {
    const info = this.sql.q(`INSERT INTO snapshots (id, tenant, user, profile, session, digest, sandbox_key, name, kind, base_of, backend, ref, bytes, created_ms, cwd, shell_stem)
      SELECT @id, @tenant, @user, @profile, @session, @digest, @sandboxKey, @name, @kind, @baseOf, @backend, '', 0, @createdMs, @cwd, @shellStem
      WHERE NOT EXISTS (SELECT 1 FROM snapshots WHERE tenant = @tenant AND digest = @digest AND name = @name)
        AND (SELECT count(*) FROM snapshots WHERE tenant = @tenant) < @maxCount
        AND (SELECT coalesce(sum(bytes), 0) FROM snapshots WHERE tenant = @tenant) < @maxBytes
      ON CONFLICT DO NOTHING`).run({ ...r, maxCount: quota.count, maxBytes: quota.bytes });
    if (info.changes === 1) return 'reserved';
    return this.byName(r.tenant, r.digest, r.name) === undefined ? 'over' : 'taken';
  }

  /**
   * Records what the backend made for a reserved snapshot, only if its tenant's snapshots stay
   * within `maxBytes` with it counted; false (nothing changed) when they would not.
   */
  complete(id: string, ref: string, bytes: number, maxBytes: number): boolean {
    return this.sql.q(`UPDATE snapshots SET ref = @ref, bytes = @bytes WHERE id = @id
      AND (SELECT coalesce(sum(s.bytes), 0) FROM snapshots s WHERE s.tenant = snapshots.tenant AND s.id <> @id) + @bytes <= @maxBytes`)
      .run({ id, ref, bytes, maxBytes }).changes === 1;
  }

  /**
   * Sets a reserved (not yet made) snapshot's bytes to what its backend is about to copy, only if
   * its tenant's snapshots stay within `maxBytes` with them counted; false (nothing changed) when
   * they would not. Concurrent creates of a tenant each see the others' claims.
   */
  claimBytes(id: string, bytes: number, maxBytes: number): boolean {
    return this.sql.q(`UPDATE snapshots SET bytes = @bytes WHERE id = @id AND ref = ''
      AND (SELECT coalesce(sum(s.bytes), 0) FROM snapshots s WHERE s.tenant = snapshots.tenant AND s.id <> @id) + @bytes <= @maxBytes`)
      .run({ id, bytes, maxBytes }).changes === 1;
  }

  byName(tenant: string, digest: string, name: string): SnapshotRecord | undefined {
    const row = this.sql.q('SELECT * FROM snapshots WHERE tenant = ? AND digest = ? AND name = ?').get(tenant, digest, name) as SnapshotRow | undefined;
    return row ? toSnapshot(row) : undefined;
  }

  /** The tenant's named snapshots, oldest first; of one sandbox when `digest` is set. */
  list(tenant: string, digest?: string): SnapshotRecord[] {
    const rows = this.sql.q(`SELECT * FROM snapshots WHERE tenant = @tenant AND kind = 'named' AND (@digest IS NULL OR digest = @digest)
      ORDER BY created_ms, id`).all({ tenant, digest: digest ?? null }) as SnapshotRow[];
    return rows.map(toSnapshot);
  }

  /** What the tenant's snapshots (base ones included) add up to. */
  usage(tenant: string): { count: number; bytes: number } {
    return this.sql.q('SELECT count(*) AS count, coalesce(sum(bytes), 0) AS bytes FROM snapshots WHERE tenant = ?').get(tenant) as { count: number; bytes: number };
  }

  /** Moves a base snapshot to the sandbox forked from it. */
  setBaseOf(id: string, digest: string): void {
    this.sql.q('UPDATE snapshots SET base_of = ? WHERE id = ?').run(digest, id);
  }

  /** A removed snapshot whose backend kept its storage: no longer a snapshot, its bytes still counted. */
  markGone(tenant: string, id: string): void {
    this.sql.q(`UPDATE snapshots SET kind = 'gone', name = '@gone-' || id WHERE tenant = ? AND id = ?`).run(tenant, id);
  }

  delete(tenant: string, id: string): void {
    this.sql.q('DELETE FROM snapshots WHERE tenant = ? AND id = ?').run(tenant, id);
  }

  /** Every snapshot of every tenant (reapers: retention, bases whose sandbox went, orphans). */
  all(): SnapshotRecord[] {
    return (this.sql.q('SELECT * FROM snapshots ORDER BY created_ms').all() as SnapshotRow[]).map(toSnapshot);
  }
}
