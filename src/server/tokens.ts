import * as crypto from 'node:crypto';
import { existsSync, readFileSync, renameSync } from 'node:fs';
import { join } from 'node:path';
import type Database from 'better-sqlite3';
import { z } from 'zod';
import { openStateDb } from '../broker/state/berth-home.js';
import type { Broker } from '../broker/broker.js';
import { ConfigError, UsageError } from '../errors.js';
import { DEFAULT_PROFILE } from '../scope/call-scope.js';
import { normalizeScope } from '../scope/normalize.js';

/*
 * Bearer tokens → a tenant and the profiles it may use (docs/design.md §8: a token cannot choose anything
 * else). They live in the `tokens` table of the SQLite state (`$BERTH_HOME/state.db`), so a
 * create or a revoke is one atomic statement: concurrent CLI runs lose nothing, and a revoke
 * cannot be undone by a create racing it. Only the sha256 of each token is stored: a leaked
 * state grants nothing. Tokens carry 256 random bits, so a plain sha256 (no salt, no slow hash)
 * is enough, and a lookup by hash leaks nothing through timing. A running server sees a create or
 * a revoke by any process on the next request: a grant is kept in memory only while SQLite's
 * `data_version` of the connection is unchanged, which any other connection's commit changes, and
 * a write through any store on the same connection empties that connection's grants. The tokens
 * table is written only through `TokenStore`.
 */

const TOKEN_PREFIX = 'berth_';
const TOKEN_RE = /^berth_[A-Za-z0-9_-]{43}$/;
/** A token's name: what an operator reads in `token list` and the audit, so short and terminal-safe. */
const NAME_RE = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;
const LEGACY_FILE = 'tokens.json';

const SCHEMA = `
CREATE TABLE IF NOT EXISTS tokens (
  id TEXT PRIMARY KEY, sha256 TEXT NOT NULL UNIQUE, tenant TEXT NOT NULL, profiles TEXT NOT NULL, created_ms INTEGER NOT NULL,
  kind TEXT NOT NULL DEFAULT 'tenant');
`;

/** Names are unique per tenant (metrics tokens, with no tenant, among themselves): a name says which token it is. */
const NAME_INDEX = 'CREATE UNIQUE INDEX IF NOT EXISTS tokens_name ON tokens (tenant, name) WHERE name IS NOT NULL;';

/** The tokens file berth kept before tokens moved into the state; imported once, then renamed. */
const LegacyFileSchema = z.strictObject({
  version: z.literal(1),
  tokens: z.array(z.strictObject({
    id: z.string().regex(/^tok_[0-9a-f]{12}$/),
    sha256: z.string().regex(/^[0-9a-f]{64}$/),
    tenant: z.string(),
    createdMs: z.number().int().nonnegative(),
  })),
});

/** A stored token: never the token itself. */
export interface TokenEntry {
  id: string;
  sha256: string;
  tenant: string;
  /** The profiles requests with this token may name (a request naming none means `default`). */
  profiles: string[];
  createdMs: number;
  /** A metrics token (`berth token create --metrics`): it reads `/metrics` and nothing else; no tenant, no profiles. */
  metrics?: true;
  /** The name the operator gave it (`--name`), unique within its tenant; tokens made before names have none. */
  name?: string;
}

/** What a request holding a valid token may do: its tenant and profiles, or (a metrics token) only read `/metrics`. */
export interface TokenGrant {
  id: string;
  tenant: string;
  profiles: readonly string[];
  metrics?: true;
  name?: string;
}

interface TokenRow {
  id: string;
  sha256: string;
  tenant: string;
  profiles: string;
  created_ms: number;
  kind: string;
  name: string | null;
}

/** One call per lookup, not a Hash object (a few µs of every request; `crypto.hash` is Node 20.12 and later). */
const sha256: (token: string) => string = typeof crypto.hash === 'function'
  ? (token) => crypto.hash('sha256', token, 'hex')
  : (token) => crypto.createHash('sha256').update(token, 'utf8').digest('hex');

function toEntry(r: TokenRow): TokenEntry {
  const entry: TokenEntry = { id: r.id, sha256: r.sha256, tenant: r.tenant, profiles: JSON.parse(r.profiles) as string[], createdMs: r.created_ms };
  if (r.name !== null) entry.name = r.name;
  // Anything but a tenant token grants no tenant: an unknown kind (a newer berth's) is read as metrics-only.
  if (r.kind !== 'tenant') return { ...entry, tenant: '', profiles: [], metrics: true };
  return entry;
}

/**
 * The grants found on one connection, valid while its `data_version` is what it was when they were
 * read. Shared by every store on that connection, so a revoke through one is seen by the others.
 * Only grants of valid tokens are kept (by sha256, never the token), so its size is bounded by the
 * tokens table, and by `MAX_CACHED_GRANTS` regardless.
 */
interface GrantCache {
  version: number | undefined;
  grants: Map<string, TokenGrant>;
  /** Counts the changes of the tokens table seen on this connection (see `TokenStore.generation`). */
  generation: number;
}

const MAX_CACHED_GRANTS = 10_000;
const grantCaches = new WeakMap<Database.Database, GrantCache>();

function grantCacheOf(db: Database.Database): GrantCache {
  let cache = grantCaches.get(db);
  if (cache === undefined) {
    cache = { version: undefined, grants: new Map(), generation: 0 };
    grantCaches.set(db, cache);
  }
  return cache;
}

/** The tokens table changed: no grant read before holds, and holders of grants look again. */
function changed(cache: GrantCache): void {
  cache.grants.clear();
  cache.generation++;
}

/** Profiles as a token stores them: validated like a call's profile, deduplicated, `default` when none. */
function tokenProfiles(profiles: readonly string[] | undefined): string[] {
  const list = profiles === undefined || profiles.length === 0 ? [DEFAULT_PROFILE] : profiles;
  return [...new Set(list.map((p) => normalizeScope({ profile: p }).profile))];
}

export interface TokenStoreOptions {
  /** Told once when an old tokens.json is imported (the CLI prints it on stderr). */
  notice?: (message: string) => void;
}

/**
 * The tokens of one installation, in its SQLite state. Opens its own connection; `close()` it.
 *
 * @example
 * const tokens = TokenStore.open(broker.berthHome);
 * const { token } = tokens.create('acme', ['default', 'bot']); // shown once
 * tokens.grantOf(`Bearer ${token}`); // { id: 'tok_...', tenant: 'acme', profiles: ['default', 'bot'] }
 */
export class TokenStore {
  private readonly statements = new Map<string, Database.Statement>();
  private readonly cache: GrantCache;
  /** `PRAGMA data_version`: changes when another connection commits; ~5 µs here against ~13 µs for the lookup it saves. */
  private readonly dataVersion: Database.Statement;

  private constructor(private readonly db: Database.Database, readonly berthHome: string, private readonly ownsDb: boolean) {
    this.cache = grantCacheOf(db);
    this.dataVersion = db.prepare('PRAGMA data_version').pluck();
  }

  /**
   * Opens the token table of `$BERTH_HOME/state.db`. A `tokens.json` left by an older berth is
   * imported first (its tokens may use the default profile only) and renamed, so it is never
   * read again.
   *
   * @throws ConfigError when that old file cannot be read or parsed (it is then left in place).
   */
  static open(berthHome: string, opts: TokenStoreOptions = {}): TokenStore {
    const db = openStateDb(berthHome);
    try {
      return TokenStore.over(db, berthHome, true, opts);
    } catch (err) {
      db.close();
      throw err;
    }
  }

  /**
   * The token table of the broker's installation, read through the broker's own connection to
   * the state: for a server, which looks a token up on every request. A connection of its own
   * would find its page cache dropped by each of the broker's writes (an audit row per call) and
   * read the pages again, ~15-30 µs of every request; on the broker's connection only
   * another process's write does that. A token created or revoked by any process counts from the
   * next request (see the top of this file). `close()` leaves the connection to the broker; close
   * this store before the broker.
   *
   * @throws ConfigError as `open`.
   */
  static sharing(broker: Broker, opts: TokenStoreOptions = {}): TokenStore {
    return TokenStore.over(broker.stateConnection, broker.berthHome, false, opts);
  }

  private static over(db: Database.Database, berthHome: string, ownsDb: boolean, opts: TokenStoreOptions): TokenStore {
    db.exec(SCHEMA);
    addColumns(db);
    db.exec(NAME_INDEX);
    const store = new TokenStore(db, berthHome, ownsDb);
    store.importLegacyFile(opts.notice);
    return store;
  }

  /**
   * Makes a token for `tenant` and `profiles` (default: the default profile only), named `name`
   * when given; the token itself is returned once and never stored.
   *
   * @throws UsageError for a malformed name, or one another token of the tenant has.
   */
  create(tenant: string, profiles?: readonly string[], opts: { name?: string | undefined } = {}): { token: string; entry: TokenEntry } {
    const valid = normalizeScope({ tenant }).tenant;
    const token = `${TOKEN_PREFIX}${crypto.randomBytes(32).toString('base64url')}`;
    const entry: TokenEntry = {
      id: `tok_${crypto.randomBytes(6).toString('hex')}`, sha256: sha256(token), tenant: valid, profiles: tokenProfiles(profiles), createdMs: Date.now(),
      ...nameOf(opts.name),
    };
    this.insert(entry, 'tenant', `tenant "${valid}"`);
    return { token, entry };
  }

  /**
   * Makes a metrics token: it may read `GET /metrics` (counts of every tenant) and nothing else;
   * no tenant route accepts it. Shown once, like a tenant token.
   *
   * @throws UsageError for a malformed name, or one another metrics token has.
   */
  createMetrics(opts: { name?: string | undefined } = {}): { token: string; entry: TokenEntry } {
    const token = `${TOKEN_PREFIX}${crypto.randomBytes(32).toString('base64url')}`;
    const entry: TokenEntry = {
      id: `tok_${crypto.randomBytes(6).toString('hex')}`, sha256: sha256(token), tenant: '', profiles: [], createdMs: Date.now(), metrics: true, ...nameOf(opts.name),
    };
    this.insert(entry, 'metrics', 'the metrics tokens');
    return { token, entry };
  }

  /** One statement: the unique index decides a name race between two creates. */
  private insert(entry: TokenEntry, kind: 'tenant' | 'metrics', among: string): void {
    try {
      this.q('INSERT INTO tokens (id, sha256, tenant, profiles, created_ms, kind, name) VALUES (?, ?, ?, ?, ?, ?, ?)')
        .run(entry.id, entry.sha256, entry.tenant, JSON.stringify(entry.profiles), entry.createdMs, kind, entry.name ?? null);
    } catch (err) {
      if ((err as { code?: string }).code === 'SQLITE_CONSTRAINT_UNIQUE' && entry.name !== undefined) {
        throw new UsageError(`a token named "${entry.name}" exists already among ${among}; pick another name, or revoke that one first (berth token list)`);
      }
      throw err;
    }
    changed(this.cache);
  }

  /** Every token, oldest first. */
  list(): TokenEntry[] {
    return (this.q('SELECT * FROM tokens ORDER BY created_ms, id').all() as TokenRow[]).map(toEntry);
  }

  /** Removes a token by its id (`tok_...`); false when there is none. */
  revoke(id: string): boolean {
    const removed = this.q('DELETE FROM tokens WHERE id = ?').run(id).changes === 1;
    changed(this.cache);
    return removed;
  }

  /**
   * Bumped each time a change of the tokens is seen: a create or revoke through any store on this
   * connection (at once), another process's (at the next `grantOf` or `refresh`). Reading it
   * costs nothing; a holder of long-lived grants (an open stream) compares it to know when to
   * look its grants up again.
   */
  get generation(): number {
    return this.cache.generation;
  }

  /** Looks whether another process changed the tokens (one read of SQLite's `data_version`, ~6 µs): `grantOf` does so first thing. */
  refresh(): void {
    const version = this.dataVersion.get() as number;
    if (version === this.cache.version) return;
    changed(this.cache);
    this.cache.version = version;
  }

  /**
   * The grant of an `Authorization` header value, or undefined (missing, malformed, unknown,
   * revoked). Every lookup first `refresh`es, a missing or malformed token's too: any request
   * that looks for a token tells `generation` of a revoke.
   */
  grantOf(authorization: string | undefined): TokenGrant | undefined {
    // Read before the table: a commit between the two is seen by the next request's check.
    this.refresh();
    if (authorization === undefined) return undefined;
    const m = /^Bearer ([^\s]+)$/i.exec(authorization.trim());
    if (m === null || !TOKEN_RE.test(m[1] as string)) return undefined;
    const hash = sha256(m[1] as string);
    const cache = this.cache;
    const kept = cache.grants.get(hash);
    if (kept !== undefined) return kept;
    const row = this.q('SELECT * FROM tokens WHERE sha256 = ?').get(hash) as TokenRow | undefined;
    if (row === undefined) return undefined;
    const { id, tenant, profiles, metrics, name } = toEntry(row);
    Object.freeze(profiles);
    const grant: TokenGrant = Object.freeze({ id, tenant, profiles, ...(metrics === true ? { metrics } : {}), ...(name === undefined ? {} : { name }) });
    if (cache.grants.size >= MAX_CACHED_GRANTS) cache.grants.clear();
    cache.grants.set(hash, grant);
    return grant;
  }

  /** Whether `authorization` still grants exactly `caller`'s tenant and profiles (a tenant token's). */
  grantsStill(authorization: string | undefined, caller: { tenant: string; profiles: readonly string[] }): boolean {
    const grant = this.grantOf(authorization);
    return grant !== undefined && grant.metrics !== true && grant.tenant === caller.tenant &&
      grant.profiles.length === caller.profiles.length && grant.profiles.every((p) => caller.profiles.includes(p));
  }

  /** Closes its connection; a store `sharing` the broker's leaves that open (it is the broker's). */
  close(): void {
    if (this.ownsDb && this.db.open) this.db.close();
  }

  /** Prepared once per SQL text: the lookup runs on every request. */
  private q(sql: string): Database.Statement {
    let st = this.statements.get(sql);
    if (st === undefined) {
      st = this.db.prepare(sql);
      this.statements.set(sql, st);
    }
    return st;
  }

  /**
   * Imports `$BERTH_HOME/tokens.json` under an immediate transaction: of concurrent openers one
   * imports and renames the file, the others find it gone. The rename happens before the commit,
   * so a revoke after the import is never undone by a second import of the same file.
   */
  private importLegacyFile(notice: ((message: string) => void) | undefined): void {
    const file = join(this.berthHome, LEGACY_FILE);
    const renamed = `${file}.imported`;
    // The usual case costs no write lock: only a present file is worth the transaction.
    if (!existsSync(file)) return;
    const count = this.db.transaction((): number | undefined => {
      let text: string;
      try {
        text = readFileSync(file, 'utf8');
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
        throw new ConfigError(`cannot read the old tokens file ${file}: ${(err as Error).message}; fix its permissions or remove it`);
      }
      const parsed = parseLegacy(file, text);
      const insert = this.db.prepare('INSERT OR IGNORE INTO tokens (id, sha256, tenant, profiles, created_ms) VALUES (?, ?, ?, ?, ?)');
      for (const t of parsed) insert.run(t.id, t.sha256, normalizeScope({ tenant: t.tenant }).tenant, JSON.stringify([DEFAULT_PROFILE]), t.createdMs);
      renameSync(file, renamed);
      return parsed.length;
    }).immediate();
    changed(this.cache);
    if (count !== undefined) {
      notice?.(`imported ${count} token(s) from ${file} into the state (state.db), for the default profile only; renamed it to ${renamed}, which is not read again`);
    }
  }
}

/**
 * A state made by an older berth lacks columns: `kind` (before metrics tokens: every token then
 * is a tenant token) and `name` (before names: its tokens have none). Under an immediate
 * transaction, so concurrent openers add each once.
 */
function addColumns(db: Database.Database): void {
  const added = [['kind', "TEXT NOT NULL DEFAULT 'tenant'"], ['name', 'TEXT']] as const;
  const missing = (): (typeof added)[number][] => {
    const have = new Set((db.prepare('PRAGMA table_info(tokens)').all() as { name: string }[]).map((c) => c.name));
    return added.filter(([column]) => !have.has(column));
  };
  if (missing().length === 0) return;
  db.transaction(() => {
    for (const [column, type] of missing()) db.exec(`ALTER TABLE tokens ADD COLUMN ${column} ${type}`);
  }).immediate();
}

/** A token name as given to `create`: checked, or none. */
function nameOf(name: string | undefined): { name?: string } {
  if (name === undefined) return {};
  if (!NAME_RE.test(name)) {
    throw new UsageError(`token name ${JSON.stringify(name)} must be 1-64 characters of letters, digits, '.', '_' or '-', starting with a letter or digit, e.g. "ci-bot"`);
  }
  return { name };
}

function parseLegacy(file: string, text: string): z.infer<typeof LegacyFileSchema>['tokens'] {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch {
    throw new ConfigError(`the old tokens file ${file} is not valid JSON; fix it, or remove it and create new tokens (berth token create)`);
  }
  const parsed = LegacyFileSchema.safeParse(raw);
  if (!parsed.success) {
    throw new ConfigError(`the old tokens file ${file} is malformed (${parsed.error.issues[0]?.message ?? 'invalid'}); fix it, or remove it and create new tokens`);
  }
  return parsed.data.tokens;
}

/** For the CLI: a tenant name check with the scope rules' message. */
export function assertTenant(tenant: string | undefined): string {
  if (tenant === undefined || tenant === '') throw new UsageError('--tenant T is required, e.g. berth token create --tenant acme');
  return normalizeScope({ tenant }).tenant;
}
