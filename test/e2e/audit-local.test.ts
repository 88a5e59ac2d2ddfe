import Database from 'better-sqlite3';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { Broker } from '../../src/broker/broker.js';
import { StateStore } from '../../src/broker/state/state-store.js';
import { parseConfig } from '../../src/setup/parse-config.js';
import { waitFor } from '../helpers/docker-e2e.js';
import { tempDir } from '../helpers/temp-dir.js';

/*
 * The audit log in a real state.db: command texts are redacted, then cut at audit.maxCommandChars;
 * entries older than audit.retentionDays go at broker open and with the periodic sweep.
 */

const DAY_MS = 24 * 60 * 60 * 1000;

function open(berthHome: string, config: Record<string, unknown>, opts: { env?: NodeJS.ProcessEnv; reap?: boolean } = {}): Promise<Broker> {
  return Broker.open({
    config: parseConfig({ backend: 'local', persistent: false, ...config }), berthHome,
    env: { PATH: process.env['PATH'], ...opts.env }, reap: opts.reap ?? false,
  });
}

/** Audit rows straight from the SQLite file. */
function rows(berthHome: string): { time_ms: number; command: string | null }[] {
  const db = new Database(join(berthHome, 'state.db'), { readonly: true });
  try {
    return db.prepare('SELECT time_ms, command FROM audit ORDER BY id').all() as { time_ms: number; command: string | null }[];
  } finally {
    db.close();
  }
}

/** Writes entries `daysAgo` old through a second store on the same file, as another berth process would. */
function addOld(berthHome: string, daysAgo: number, command: string): void {
  const store = StateStore.open(berthHome);
  store.audit.add({
    timeMs: Date.now() - daysAgo * DAY_MS, tenant: 'local', profile: 'default', user: null, session: 'old', sandboxKey: null,
    kind: 'exec', command, exitCode: 0, durationMs: 1,
  });
  store.close();
}

describe('audit log (real SQLite file)', () => {
  it('a long command is cut at audit.maxCommandChars with a mark; a secret across the cut is redacted first, never half kept', async () => {
    const h = tempDir('berth-audit-');
    const secret = 'S3CRET-VALUE-0123456789-abcdef';
    const broker = await open(h, { audit: { maxCommandChars: 95 }, env: { forward: ['API_TOKEN'] } }, { env: { API_TOKEN: secret } });
    try {
      // The secret starts at 90: without redaction first, a cut at 95 would keep its first 5 chars.
      const command = `: ${'a'.repeat(88)}${secret} ${'b'.repeat(300_000)}`;
      expect(command.indexOf(secret)).toBe(90);
      await broker.exec({ session: 's' }, command);
      await broker.exec({ session: 's' }, 'echo short');
      const [long, short] = broker.audit({ tenant: 'local', session: 's' }).reverse();
      expect(short!.command).toBe('echo short');
      const redactedLength = command.length - secret.length + '[REDACTED]'.length;
      expect(long!.command).toBe(`: ${'a'.repeat(88)}[REDA… [${redactedLength - 95} more chars]`);
      expect(long!.command).not.toContain(secret.slice(0, 4));
    } finally {
      await broker.close();
    }
    const stored = rows(h).map((r) => r.command ?? '');
    expect(Math.max(...stored.map((c) => c.length))).toBeLessThan(150);
    expect(stored.join('\n')).not.toContain(secret.slice(0, 4));
  });

  it('the default cap is 4096 characters', async () => {
    const h = tempDir('berth-audit-');
    const broker = await open(h, {});
    try {
      await broker.exec({ session: 'd' }, `: ${'x'.repeat(10_000)}`);
      const [e] = broker.audit({ tenant: 'local', session: 'd' });
      expect(e!.command).toBe(`: ${'x'.repeat(4094)}… [5906 more chars]`);
    } finally {
      await broker.close();
    }
  });

  it('entries older than audit.retentionDays are deleted when a broker opens', async () => {
    const h = tempDir('berth-audit-');
    addOld(h, 40, 'echo forty-days-ago');
    addOld(h, 8, 'echo eight-days-ago');
    addOld(h, 1, 'echo yesterday');
    expect(rows(h)).toHaveLength(3);
    const broker = await open(h, { audit: { retentionDays: 7 } });
    await broker.close();
    expect(rows(h).map((r) => r.command)).toEqual(['echo yesterday']);
    // The default keeps 30 days.
    addOld(h, 31, 'echo a-month-ago');
    addOld(h, 29, 'echo within-a-month');
    await (await open(h, {})).close();
    expect(rows(h).map((r) => r.command)).toEqual(['echo yesterday', 'echo within-a-month']);
  });

  it('the periodic sweep deletes entries that grew old while the broker runs', async () => {
    const h = tempDir('berth-audit-');
    const broker = await open(h, { audit: { retentionDays: 1 }, lifecycle: { idleSeconds: 10 } }, { reap: true });
    try {
      await broker.exec({ session: 'live' }, 'echo recent');
      addOld(h, 2, 'echo old-while-running');
      expect(rows(h).map((r) => r.command)).toContain('echo old-while-running');
      expect(await waitFor(() => !rows(h).some((r) => r.command === 'echo old-while-running'), 20_000)).toBe(true);
      expect(broker.audit({ tenant: 'local', session: 'live' }).map((e) => e.command)).toEqual(['echo recent']);
    } finally {
      await broker.close();
    }
  }, 30_000);
});
