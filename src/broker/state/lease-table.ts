import type { Statements } from './statements.js';

export const LEASE_SCHEMA = `
CREATE TABLE IF NOT EXISTS leases (name TEXT PRIMARY KEY, owner TEXT NOT NULL, taken_ms INTEGER NOT NULL);
`;

/** Leases on engine objects several processes of one installation may create (e.g. tenant networks). */
export class LeaseTable {
  constructor(private readonly sql: Statements) {}

  /**
   * Takes the named lease for `owner` when it is free, or held by an owner `isDead` says is gone
   * (that holder is replaced in one compare-and-swap). True for exactly one of racing callers.
   */
  take(name: string, owner: string, nowMs: number, isDead: (holder: string) => boolean): boolean {
    if (this.sql.q('INSERT INTO leases (name, owner, taken_ms) VALUES (?, ?, ?) ON CONFLICT (name) DO NOTHING').run(name, owner, nowMs).changes === 1) return true;
    const holder = (this.sql.q('SELECT owner FROM leases WHERE name = ?').get(name) as { owner: string } | undefined)?.owner;
    if (holder === undefined || !isDead(holder)) return false;
    return this.sql.q('UPDATE leases SET owner = ?, taken_ms = ? WHERE name = ? AND owner = ?').run(owner, nowMs, name, holder).changes === 1;
  }

  release(name: string, owner: string): void {
    this.sql.q('DELETE FROM leases WHERE name = ? AND owner = ?').run(name, owner);
  }
}
