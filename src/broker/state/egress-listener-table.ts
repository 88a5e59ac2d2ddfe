import type { Statements } from './statements.js';

/*
 * Which berth process of this installation serves each sandbox's egress listener (its proxy port
 * inside the sandbox's network namespace, which one process can hold at a time), and with what: a
 * digest of the egress context it serves (policy, credentials' names, hosts and value digests),
 * never a value.
 */

export const EGRESS_LISTENER_SCHEMA = `
CREATE TABLE IF NOT EXISTS egress_listeners (ref TEXT PRIMARY KEY, holder TEXT NOT NULL, digest TEXT NOT NULL, updated_ms INTEGER NOT NULL);
`;

/** The process that holds a sandbox's listener, and the digest of what it serves. */
export interface ListenerHolder {
  holder: string;
  digest: string;
}

export class EgressListenerTable {
  constructor(private readonly sql: Statements) {}

  /**
   * Claims sandbox `ref`'s listener for `holder` serving `digest`: when no one holds it, when
   * `holder` does already, or when its holder is dead (replaced in one compare-and-swap). Returns
   * 'mine', or the live holder that keeps it.
   */
  claim(ref: string, holder: string, digest: string, nowMs: number, isDead: (holder: string) => boolean): 'mine' | ListenerHolder {
    const insert = this.sql.q('INSERT INTO egress_listeners (ref, holder, digest, updated_ms) VALUES (?, ?, ?, ?) ON CONFLICT (ref) DO NOTHING');
    if (insert.run(ref, holder, digest, nowMs).changes === 1) return 'mine';
    for (let i = 0; i < 3; i++) {
      const row = this.get(ref);
      if (row === undefined) {
        if (insert.run(ref, holder, digest, nowMs).changes === 1) return 'mine';
        continue;
      }
      if (row.holder !== holder && !isDead(row.holder)) return row;
      const swapped = this.sql.q('UPDATE egress_listeners SET holder = ?, digest = ?, updated_ms = ? WHERE ref = ? AND holder = ?')
        .run(holder, digest, nowMs, ref, row.holder).changes === 1;
      if (swapped) return 'mine';
    }
    return this.get(ref) ?? { holder: '?', digest: '' };
  }

  get(ref: string): ListenerHolder | undefined {
    return this.sql.q('SELECT holder, digest FROM egress_listeners WHERE ref = ?').get(ref) as ListenerHolder | undefined;
  }

  /** Gives `ref`'s listener back from `holder` to `to` (the holder it was taken from), if `holder` holds it; whether it did. */
  handBack(ref: string, holder: string, to: ListenerHolder): boolean {
    return this.sql.q('UPDATE egress_listeners SET holder = ?, digest = ?, updated_ms = ? WHERE ref = ? AND holder = ?')
      .run(to.holder, to.digest, Date.now(), ref, holder).changes === 1;
  }

  /** Lets go of `ref`'s listener, if `holder` holds it. */
  release(ref: string, holder: string): void {
    this.sql.q('DELETE FROM egress_listeners WHERE ref = ? AND holder = ?').run(ref, holder);
  }
}
