import { chmodSync, mkdirSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { runBerth, tempInstall } from '../helpers/cli.js';

/*
 * berth's own files are private whatever made them (an older berth, a umask of 022, a copy):
 * any berth command that opens BERTH_HOME tightens it (docs/design.md §8: berth's state is out of reach).
 */

const LOCAL = 'backend: local\npersistent: false\n';

function mode(path: string): string {
  return (statSync(path).mode & 0o777).toString(8);
}

const DB_FILES = ['state.db', 'state.db-wal', 'state.db-shm'];

/**
 * A home as an older berth (or a umask of 022) left it: 0755 dirs, a 0644 state.db and WAL files.
 * The returned connection stays open, so the WAL files exist while berth runs.
 */
function looseHome(home: string): Database.Database {
  mkdirSync(home, { recursive: true });
  chmodSync(home, 0o755);
  const db = new Database(join(home, 'state.db'));
  db.pragma('journal_mode = WAL');
  db.exec('CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT NOT NULL)');
  for (const f of DB_FILES) chmodSync(join(home, f), 0o644);
  for (const sub of ['sandboxes', 'staging', 'spill']) {
    mkdirSync(join(home, sub), { recursive: true });
    chmodSync(join(home, sub), 0o755);
  }
  writeFileSync(join(home, 'spill', 'old.out'), 'x');
  return db;
}

describe('BERTH_HOME is private, whatever made it', () => {
  for (const args of [['explain', '--session', 's'], ['token', 'list'], ['ls'], ['exec', '--session', 's', '--', 'true']]) {
    it(`berth ${args[0]} tightens a 0755 home with a 0644 state.db`, async () => {
      using t = tempInstall(LOCAL);
      const db = looseHome(t.home);
      try {
        expect(DB_FILES.map((f) => mode(join(t.home, f)))).toEqual(['644', '644', '644']);
        const r = await runBerth(args, { env: t.env, cwd: t.dir });
        expect(r.code, r.stderr).toBe(0);
        expect(mode(t.home)).toBe('700');
        expect(DB_FILES.map((f) => mode(join(t.home, f)))).toEqual(['600', '600', '600']);
        for (const sub of ['sandboxes', 'staging', 'spill']) expect(mode(join(t.home, sub)), sub).toBe('700');
      } finally {
        db.close();
      }
    });
  }

  it('a fresh home is created private', async () => {
    using t = tempInstall(LOCAL);
    const r = await runBerth(['exec', '--session', 's', '--', 'echo hi'], { env: t.env, cwd: t.dir });
    expect(r.code, r.stderr).toBe(0);
    expect(mode(t.home)).toBe('700');
    expect(mode(join(t.home, 'state.db'))).toBe('600');
    expect(mode(join(t.home, 'sandboxes'))).toBe('700');
  });
});
