import Database from 'better-sqlite3';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { AuditEntry } from '../../src/broker/state/audit-table.js';
import { StateStore } from '../../src/broker/state/state-store.js';
import { tempDir } from '../helpers/temp-dir.js';

const entry = (command: string): AuditEntry => ({
  timeMs: 1, tenant: 'acme', profile: 'default', user: null, session: 's1', sandboxKey: 'session:s1', kind: 'exec', command, exitCode: 0, durationMs: 1,
});

/** Runs `sql` on the store's file from a second connection, as another process (or a broken disk) would. */
function fromOutside(home: string, sql: string): void {
  const other = new Database(join(home, 'state.db'));
  other.exec(sql);
  other.close();
}

/** A store whose `table` refuses every insert (a trigger from a second connection), and the lines it told the log. */
function refusingStore(table: 'audit' | 'egress_audit'): { store: StateStore; lines: string[]; allow: () => void } {
  const home = tempDir('berth-audit-fail-');
  const lines: string[] = [];
  const store = StateStore.open(home, { onWriteFailure: (line) => void lines.push(line) });
  fromOutside(home, `CREATE TRIGGER refuse BEFORE INSERT ON ${table} BEGIN SELECT RAISE(ABORT, 'refused'); END;`);
  return { store, lines, allow: () => fromOutside(home, 'DROP TRIGGER refuse') };
}

// On a real SQLite file: the audit's rows are written in batches; one that cannot be written never
// fails a call or the process, is kept, and is said on the log.
describe('audit entries that cannot be written', () => {
  beforeEach(() => void vi.useFakeTimers());
  afterEach(() => void vi.useRealTimers());

  it('are kept and written once the file takes them, and the log and the backlog say both', () => {
    const { store, lines, allow } = refusingStore('audit');
    expect(store.writeBacklog()).toEqual([{ log: 'audit', unwritten: 0, dropped: 0 }, { log: 'egress_audit', unwritten: 0, dropped: 0 }]);
    store.audit.add(entry('echo one'));
    expect(() => vi.advanceTimersByTime(50)).not.toThrow();
    expect(lines).toEqual([expect.stringMatching(/^the audit could not be written to state\.db \(refused\); its 1 newest entries are kept in memory/)]);
    store.audit.add(entry('echo two'));
    expect(store.writeBacklog()[0]).toEqual({ log: 'audit', unwritten: 2, dropped: 0 });
    // A read while it fails answers what is on disk, and does not try the write itself.
    expect(store.audit.list({ tenant: 'acme' })).toEqual([]);
    allow();
    vi.advanceTimersByTime(1_000);
    expect(store.audit.list({ tenant: 'acme' }).map((e) => e.command)).toEqual(['echo two', 'echo one']);
    expect(lines.at(-1)).toBe('the audit is written to state.db again');
    expect(store.writeBacklog()[0]).toEqual({ log: 'audit', unwritten: 0, dropped: 0 });
    store.close();
  });

  it('of the egress audit are kept and said the same way, named as the egress audit', () => {
    const { store, lines, allow } = refusingStore('egress_audit');
    store.egress.add({
      timeMs: 1, tenant: 'acme', profile: 'default', session: 's1', user: null, sandboxKey: 'session:s1', host: 'example.com', port: 443,
      channel: 'connect', allowed: false, rule: 'deny', detail: null, bytesUp: 0, bytesDown: 0, credentials: [], status: null,
    });
    vi.advanceTimersByTime(50);
    expect(lines).toEqual([expect.stringMatching(/^the egress audit could not be written to state\.db \(refused\); its 1 newest entries are kept/)]);
    expect(store.writeBacklog()[1]).toEqual({ log: 'egress_audit', unwritten: 1, dropped: 0 });
    allow();
    vi.advanceTimersByTime(1_000);
    expect(store.egress.list({ tenant: 'acme' }).map((e) => e.host)).toEqual(['example.com']);
    store.close();
  });

  it('still refused at close are reported lost, and the store closes', () => {
    const { store, lines } = refusingStore('audit');
    store.audit.add(entry('echo one'));
    store.audit.add(entry('echo two'));
    expect(() => store.close()).not.toThrow();
    expect(lines.at(-1)).toBe('the audit could not be written to state.db at close: 2 entries are lost');
  });
});
