import { createHash, randomBytes } from 'node:crypto';
import { mkdirSync, readFileSync, renameSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { z } from 'zod';
import { ConfigError, UsageError } from '../errors.js';
import { normalizeScope } from '../scope/normalize.js';

/*
 * Bearer tokens → tenants. The file (`$BERTH_HOME/tokens.json`, mode 0600) stores only the
 * sha256 of each token, its tenant and when it was made: a leaked file grants nothing. Tokens
 * carry 256 random bits, so a plain sha256 (no salt, no slow hash) is enough, and a lookup by
 * hash leaks nothing through timing. The server re-reads the file when it changed, so
 * `berth token create` works against a running server.
 */

const TOKEN_PREFIX = 'berth_';
const TOKEN_RE = /^berth_[A-Za-z0-9_-]{43}$/;

const TokenEntrySchema = z.strictObject({
  id: z.string().regex(/^tok_[0-9a-f]{12}$/),
  sha256: z.string().regex(/^[0-9a-f]{64}$/),
  tenant: z.string(),
  createdMs: z.number().int().nonnegative(),
});
const TokenFileSchema = z.strictObject({ version: z.literal(1), tokens: z.array(TokenEntrySchema) });

export type TokenEntry = z.infer<typeof TokenEntrySchema>;

export function tokensPath(berthHome: string): string {
  return join(berthHome, 'tokens.json');
}

function sha256(token: string): string {
  return createHash('sha256').update(token, 'utf8').digest('hex');
}

/**
 * The tokens file of one installation.
 *
 * @example
 * const tokens = new TokenStore(tokensPath(home));
 * const { token } = tokens.create('acme'); // shown once
 * tokens.tenantOf(`Bearer ${token}`); // 'acme'
 */
export class TokenStore {
  private byHash = new Map<string, TokenEntry>();
  private loadedStamp = '';

  constructor(readonly path: string) {}

  /** Makes a token for `tenant`; the token itself is returned once and never stored. */
  create(tenant: string): { token: string; entry: TokenEntry } {
    const valid = normalizeScope({ tenant }).tenant;
    const token = `${TOKEN_PREFIX}${randomBytes(32).toString('base64url')}`;
    const entry: TokenEntry = { id: `tok_${randomBytes(6).toString('hex')}`, sha256: sha256(token), tenant: valid, createdMs: Date.now() };
    const file = this.read();
    file.tokens.push(entry);
    this.write(file.tokens);
    return { token, entry };
  }

  list(): TokenEntry[] {
    return this.read().tokens;
  }

  /** Removes a token by its id (`tok_...`); false when there is none. */
  revoke(id: string): boolean {
    const tokens = this.read().tokens;
    const kept = tokens.filter((t) => t.id !== id);
    if (kept.length === tokens.length) return false;
    this.write(kept);
    return true;
  }

  /**
   * The tenant of an `Authorization` header value, or undefined (missing, malformed, unknown).
   * A miss re-reads the file when it changed (a token created after the server started).
   */
  tenantOf(authorization: string | undefined): string | undefined {
    if (authorization === undefined) return undefined;
    const m = /^Bearer ([^\s]+)$/i.exec(authorization.trim());
    if (m === null || !TOKEN_RE.test(m[1] as string)) return undefined;
    const hash = sha256(m[1] as string);
    const hit = this.byHash.get(hash);
    if (hit !== undefined) {
      // A revoked token must stop working: a hit also checks the file is unchanged (one stat).
      if (this.stamp() === this.loadedStamp) return hit.tenant;
    }
    this.reload();
    return this.byHash.get(hash)?.tenant;
  }

  /** Loads the file now (start-up: a broken tokens file is an error, not "no tokens"). */
  reload(): void {
    const stamp = this.stamp();
    if (stamp === this.loadedStamp) return;
    const tokens = this.read().tokens;
    this.byHash = new Map(tokens.map((t) => [t.sha256, t]));
    this.loadedStamp = stamp;
  }

  private stamp(): string {
    try {
      const st = statSync(this.path);
      return `${st.mtimeMs}:${st.size}:${st.ino}`;
    } catch {
      return 'missing';
    }
  }

  private read(): { version: 1; tokens: TokenEntry[] } {
    let text: string;
    try {
      text = readFileSync(this.path, 'utf8');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return { version: 1, tokens: [] };
      throw new ConfigError(`cannot read the tokens file ${this.path}: ${(err as Error).message}`);
    }
    let raw: unknown;
    try {
      raw = JSON.parse(text);
    } catch {
      throw new ConfigError(`the tokens file ${this.path} is not valid JSON; fix it or remove it and create new tokens (berth token create)`);
    }
    const parsed = TokenFileSchema.safeParse(raw);
    if (!parsed.success) {
      throw new ConfigError(`the tokens file ${this.path} is malformed (${parsed.error.issues[0]?.message ?? 'invalid'}); fix it or remove it and create new tokens`);
    }
    return parsed.data;
  }

  private write(tokens: TokenEntry[]): void {
    mkdirSync(dirname(this.path), { recursive: true, mode: 0o700 });
    const tmp = `${this.path}.${process.pid}.tmp`;
    writeFileSync(tmp, `${JSON.stringify({ version: 1, tokens }, null, 2)}\n`, { mode: 0o600 });
    renameSync(tmp, this.path);
  }
}

/** For the CLI: a tenant name check with the scope rules' message. */
export function assertTenant(tenant: string | undefined): string {
  if (tenant === undefined || tenant === '') throw new UsageError('--tenant T is required, e.g. berth token create --tenant acme');
  return normalizeScope({ tenant }).tenant;
}
