import type Database from 'better-sqlite3';

/** The statements of one connection, each prepared once: preparing costs more than running these small queries. */
export class Statements {
  private readonly prepared = new Map<string, Database.Statement>();

  constructor(readonly db: Database.Database) {}

  q(sql: string): Database.Statement {
    let st = this.prepared.get(sql);
    if (st === undefined) {
      st = this.db.prepare(sql);
      this.prepared.set(sql, st);
    }
    return st;
  }
}
