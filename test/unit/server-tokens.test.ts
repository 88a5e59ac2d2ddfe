import { statSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { Broker } from '../../src/broker/broker.js';
import { parseConfig } from '../../src/setup/parse-config.js';
import { UsageError } from '../../src/errors.js';
import { TokenStore } from '../../src/server/tokens.js';
import { tempDir } from '../helpers/temp-dir.js';

/** A store on `home` (default: a fresh BERTH_HOME, removed when the test ends). */
function open(home = tempDir('berth-tokens-')): TokenStore {
  return TokenStore.open(home);
}

describe('token store (SQLite state)', () => {
  it('stores only sha256 hashes in a private state.db and maps a bearer header to its tenant and profiles', () => {
    const home = tempDir('berth-tokens-');
    const s = open(home);
    try {
      const { token, entry } = s.create('acme');
      expect(token).toMatch(/^berth_[A-Za-z0-9_-]{43}$/);
      const db = new Database(join(home, 'state.db'), { readonly: true });
      const dump = JSON.stringify(db.prepare('SELECT * FROM tokens').all());
      db.close();
      expect(dump).toContain(entry.sha256);
      expect(dump).not.toContain(token.slice(6, 30));
      expect(statSync(join(home, 'state.db')).mode & 0o777).toBe(0o600);
      expect(entry).toMatchObject({ tenant: 'acme', profiles: ['default'] });
      expect(s.grantOf(`Bearer ${token}`)).toEqual({ id: entry.id, tenant: 'acme', profiles: ['default'] });
      expect(s.grantOf(`bearer ${token}`)?.tenant).toBe('acme');
      // One character changed (never to itself: the token is random and may end in 'A').
      const changed = `${token.slice(0, -1)}${token.endsWith('A') ? 'B' : 'A'}`;
      for (const bad of [undefined, '', token, `Basic ${token}`, `Bearer ${token}x`, `Bearer ${changed}`, 'Bearer']) {
        expect(s.grantOf(bad)).toBeUndefined();
      }
    } finally {
      s.close();
    }
  });

  it('another connection\'s creates and revokes are seen on the next lookup', () => {
    const home = tempDir('berth-tokens-');
    const server = open(home);
    const cli = open(home);
    try {
      const a = cli.create('a', ['bot']);
      expect(server.grantOf(`Bearer ${a.token}`)).toMatchObject({ tenant: 'a', profiles: ['bot'] });
      const b = cli.create('b');
      expect(server.grantOf(`Bearer ${b.token}`)?.tenant).toBe('b');
      expect(cli.revoke(a.entry.id)).toBe(true);
      expect(server.grantOf(`Bearer ${a.token}`)).toBeUndefined();
      expect(server.grantOf(`Bearer ${b.token}`)?.tenant).toBe('b');
      expect(cli.revoke(a.entry.id)).toBe(false);
      expect(server.list().map((e) => e.id)).toEqual([b.entry.id]);
      // Looked up many times (kept in memory), then revoked through the store that looked it up.
      for (let i = 0; i < 3; i++) expect(server.grantOf(`Bearer ${b.token}`)?.tenant).toBe('b');
      expect(server.revoke(b.entry.id)).toBe(true);
      expect(server.grantOf(`Bearer ${b.token}`)).toBeUndefined();
    } finally {
      server.close();
      cli.close();
    }
  });

  it('keeps a grant in memory only until another connection commits; a revoke through any store on the same connection is seen by the others', () => {
    const home = tempDir('berth-tokens-');
    const db = new Database(join(home, 'state.db'));
    const first = open(home);
    const cli = open(home);
    try {
      // Two stores over one connection, as a server and anything else sharing the broker's.
      const owner = { stateConnection: db, berthHome: home } as unknown as Broker;
      const a = TokenStore.sharing(owner);
      const b = TokenStore.sharing(owner);
      const one = first.create('acme');
      const two = first.create('acme');
      expect(a.grantOf(`Bearer ${one.token}`)?.id).toBe(one.entry.id);
      expect(b.grantOf(`Bearer ${two.token}`)?.id).toBe(two.entry.id);
      expect(Object.isFrozen(a.grantOf(`Bearer ${one.token}`)?.profiles)).toBe(true);
      // Kept in memory: a row removed behind TokenStore's back on the same connection (which the
      // top of tokens.ts rules out) is not seen, so this lookup did not read the table...
      db.prepare('DELETE FROM tokens WHERE id = ?').run(one.entry.id);
      expect(a.grantOf(`Bearer ${one.token}`)?.id).toBe(one.entry.id);
      // ...until any other connection commits anything: then every lookup reads the table again.
      cli.create('other');
      expect(a.grantOf(`Bearer ${one.token}`)).toBeUndefined();
      expect(a.grantOf(`Bearer ${two.token}`)?.id).toBe(two.entry.id);
      expect(b.grantOf(`Bearer ${two.token}`)?.id).toBe(two.entry.id);
      // A revoke through one store on the connection: the other's next lookup refuses the token.
      expect(a.revoke(two.entry.id)).toBe(true);
      expect(b.grantOf(`Bearer ${two.token}`)).toBeUndefined();
      // A revoke by another connection between two lookups of the same store.
      const three = b.create('acme');
      expect(b.grantOf(`Bearer ${three.token}`)?.id).toBe(three.entry.id);
      expect(cli.revoke(three.entry.id)).toBe(true);
      expect(a.grantOf(`Bearer ${three.token}`)).toBeUndefined();
      expect(b.grantOf(`Bearer ${three.token}`)).toBeUndefined();
      a.close();
      b.close();
    } finally {
      first.close();
      cli.close();
      db.close();
    }
  });

  it('refuses a tenant or profile no scope could carry; profiles are deduplicated, default when none', () => {
    const s = open();
    try {
      expect(() => s.create('a b')).toThrow(UsageError);
      expect(() => s.create('../x')).toThrow(/tenant/);
      expect(() => s.create('acme', ['ok', 'no/slash'])).toThrow(/^profile "no\/slash"/);
      expect(s.create('acme', []).entry.profiles).toEqual(['default']);
      expect(s.create('acme', ['bot', 'default', 'bot']).entry.profiles).toEqual(['bot', 'default']);
      expect(s.list()).toHaveLength(2);
    } finally {
      s.close();
    }
  });
});

describe('metrics tokens', () => {
  it('a metrics token grants no tenant and no profiles, and is marked as such; a tenant token is not', () => {
    const s = open();
    try {
      const m = s.createMetrics();
      const t = s.create('acme');
      expect(s.grantOf(`Bearer ${m.token}`)).toEqual({ id: m.entry.id, tenant: '', profiles: [], metrics: true });
      expect(s.grantOf(`Bearer ${t.token}`)?.metrics).toBeUndefined();
      expect(s.list().find((e) => e.id === m.entry.id)?.metrics).toBe(true);
      expect(s.list().find((e) => e.id === t.entry.id)?.metrics).toBeUndefined();
    } finally {
      s.close();
    }
  });

  it('a state made before metrics tokens (no kind column) is upgraded: its tokens stay tenant tokens', () => {
    const home = tempDir('berth-tokens-');
    const seeded = open(home);
    const { token, entry } = seeded.create('acme', ['bot']);
    seeded.close();
    const db = new Database(join(home, 'state.db'));
    db.exec('ALTER TABLE tokens DROP COLUMN kind');
    expect((db.prepare('PRAGMA table_info(tokens)').all() as { name: string }[]).map((c) => c.name)).not.toContain('kind');
    db.close();
    const s = open(home);
    try {
      expect(s.grantOf(`Bearer ${token}`)).toEqual({ id: entry.id, tenant: 'acme', profiles: ['bot'] });
      const m = s.createMetrics();
      expect(s.grantOf(`Bearer ${m.token}`)?.metrics).toBe(true);
    } finally {
      s.close();
    }
  });
});

describe('token store on the broker\'s connection (berth serve)', () => {
  it('a store sharing the broker\'s connection sees another process\'s revoke at once, between the broker\'s writes, and leaves the connection open', async () => {
    const home = tempDir('berth-tokens-');
    await using broker = await Broker.open({ config: parseConfig({ backend: 'local', persistent: false }), berthHome: home, env: { PATH: process.env['PATH'] } });
    const shared = TokenStore.sharing(broker);
    // The CLI's `berth token create/revoke`: a connection of its own, as another process has.
    const cli = open(home);
    try {
      const { token, entry } = cli.create('acme');
      const header = `Bearer ${token}`;
      for (let i = 0; i < 3; i++) {
        // A call writes its audit row and session through the shared connection before the next lookup.
        await broker.exec({ tenant: 'acme', session: 's' }, 'true');
        expect(broker.audit({ tenant: 'acme', profiles: ['default'], limit: 10 })).toHaveLength(i + 1);
        expect(shared.grantOf(header)?.id).toBe(entry.id);
      }
      expect(cli.revoke(entry.id)).toBe(true);
      expect(shared.grantOf(header)).toBeUndefined();
      const again = cli.create('acme');
      expect(shared.grantOf(`Bearer ${again.token}`)?.id).toBe(again.entry.id);
      shared.close();
      // The connection is the broker's: it still records and reads.
      await broker.exec({ tenant: 'acme', session: 's' }, 'true');
      expect(broker.audit({ tenant: 'acme', profiles: ['default'], limit: 10 })).toHaveLength(4);
    } finally {
      cli.close();
    }
  });
});

describe('token store: generation (when holders of long-lived grants look again)', () => {
  it('moves on a create or revoke through any store on the connection at once, on another connection\'s at the next lookup or refresh; never on a lookup alone, nor on the broker\'s own writes', async () => {
    const home = tempDir('berth-tokens-');
    await using broker = await Broker.open({ config: parseConfig({ backend: 'local', persistent: false }), berthHome: home, env: { PATH: process.env['PATH'] } });
    const server = TokenStore.sharing(broker);
    const alsoShared = TokenStore.sharing(broker);
    const cli = open(home);
    try {
      const { token, entry } = server.create('acme');
      server.refresh();
      let g = server.generation;
      for (let i = 0; i < 3; i++) {
        expect(server.grantOf(`Bearer ${token}`)?.id).toBe(entry.id);
        expect(server.grantOf(undefined)).toBeUndefined();
        server.refresh();
        await broker.exec({ tenant: 'acme', session: 's' }, 'true');
      }
      expect(server.generation).toBe(g);

      alsoShared.revoke(alsoShared.create('beta').entry.id);
      expect(server.generation).toBeGreaterThan(g);
      g = server.generation;

      const other = cli.create('gamma');
      expect(server.generation).toBe(g);
      server.refresh();
      expect(server.generation).toBeGreaterThan(g);
      g = server.generation;

      cli.revoke(other.entry.id);
      // A lookup of no token at all notices it too: any request does.
      expect(server.grantOf(undefined)).toBeUndefined();
      expect(server.generation).toBeGreaterThan(g);
    } finally {
      cli.close();
      alsoShared.close();
      server.close();
    }
  });

  it('grantsStill: the same tenant and the same profiles, in any order; a metrics token, a revoked one or other profiles do not', () => {
    const s = open();
    try {
      const { token, entry } = s.create('acme', ['default', 'bot']);
      const header = `Bearer ${token}`;
      expect(s.grantsStill(header, { tenant: 'acme', profiles: ['bot', 'default'] })).toBe(true);
      expect(s.grantsStill(header, { tenant: 'acme', profiles: ['default'] })).toBe(false);
      expect(s.grantsStill(header, { tenant: 'beta', profiles: ['default', 'bot'] })).toBe(false);
      expect(s.grantsStill(`Bearer ${s.createMetrics().token}`, { tenant: '', profiles: [] })).toBe(false);
      s.revoke(entry.id);
      expect(s.grantsStill(header, { tenant: 'acme', profiles: ['default', 'bot'] })).toBe(false);
      expect(s.grantsStill(undefined, { tenant: 'acme', profiles: ['default'] })).toBe(false);
    } finally {
      s.close();
    }
  });
});
