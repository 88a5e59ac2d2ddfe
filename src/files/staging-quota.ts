import { randomBytes } from 'node:crypto';
import { lstat, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { BerthError } from '../errors.js';
import { stagingRoot, tenantDirName } from './staging.js';

/*
 * `limits.stagingBytes`: what one tenant's exports may hold in staging at once, across its
 * sessions, users and profiles (docs/design.md §8: disk is bounded). Every export counts its
 * content plus 512 bytes per archive entry (a tar header: what an entry costs, so 20,000 empty
 * files are not free).
 *
 * What is on disk is counted afresh when an export starts, without walking exported trees: a
 * committed export's dir is named `<16 hex>-<charged bytes>`, so a count reads three levels of
 * names (tenant / session / user). Anything else found there (an export in flight in another
 * berth process, a dir from an older berth) is walked in full. Exports in flight in this process
 * are counted from memory, so concurrent exports of one tenant cannot together pass the bound;
 * between processes sharing a BERTH_HOME, one that commits while another counts can be missed.
 */

/** Bytes an archive entry costs besides its content: one tar header block. */
export const ENTRY_BYTES = 512;

const EXPORT_DIR = /^[0-9a-f]{16}-(\d{1,15})$/;

/** An export that would take its tenant's staging over `limits.stagingBytes`. Exit 125 (HTTP 413). */
export class StagingFullError extends BerthError {
  constructor(what: string, tenant: string, limitBytes: number, othersBytes: number) {
    super(
      'too_large',
      `${what} would take tenant ${JSON.stringify(tenant)}'s staging over its bound of ${limitBytes} bytes ` +
        `(limits.stagingBytes; ${othersBytes} bytes are staged or being exported by other calls); close sessions whose ` +
        'exports are no longer needed (closing removes them), or raise limits.stagingBytes in the config',
    );
  }
}

interface TenantCounters {
  /** Bytes written by this process's exports still in flight. */
  pending: number;
  /** Bytes of this process's exports committed so far (only ever grows). */
  committed: number;
}

/**
 * One broker's accounting of staging per tenant. Owned by the broker (no module state).
 *
 * @example
 * const ledger = new StagingLedger(berthHome);
 * const lease = await ledger.begin('acme', config.limits.stagingBytes);
 * lease.add(4096, 'export of "/workspace/out"'); // throws StagingFullError past the bound
 * lease.commit();                                 // or lease.release() when the export failed
 */
export class StagingLedger {
  /** In-flight export dirs of this ledger are `.partial-<id>-*`: counted from memory, never walked. */
  private readonly id = randomBytes(6).toString('hex');
  private readonly tenants = new Map<string, TenantCounters>();

  constructor(private readonly berthHome: string) {}

  /** Starts accounting one export of `tenant`; counts what the tenant's staging holds now. */
  async begin(tenant: string, limitBytes: number): Promise<StagingLease> {
    let counters = this.tenants.get(tenant);
    if (counters === undefined) {
      counters = { pending: 0, committed: 0 };
      this.tenants.set(tenant, counters);
    }
    // Read before counting: an export of this process that commits meanwhile is counted twice
    // (on disk and as committed since), never missed.
    const committedAtStart = counters.committed;
    const partialPrefix = `.partial-${this.id}-`;
    const onDisk = await stagedBytes(join(stagingRoot(this.berthHome), tenantDirName(tenant)), partialPrefix);
    return new StagingLease(tenant, limitBytes, counters, onDisk - committedAtStart, partialPrefix);
  }
}

/** One export's share of its tenant's staging. `add` as bytes arrive; then `commit` or `release`. */
export class StagingLease {
  private mine = 0;
  private done = false;

  constructor(
    private readonly tenant: string,
    private readonly limitBytes: number,
    private readonly counters: TenantCounters,
    /** On disk at the start, minus this process's commits until then (they are added back live). */
    private readonly base: number,
    /** Prefix of this export's in-flight dir (under the scope's staging dir). */
    readonly partialPrefix: string,
  ) {}

  /** Counts `n` more bytes of this export; throws `StagingFullError` when the tenant's bound would pass. */
  add(n: number, what: string): void {
    if (this.done) throw new BerthError('internal', 'staging lease used after it ended');
    const staged = this.base + this.counters.committed + this.counters.pending;
    if (staged + n > this.limitBytes) {
      // Let go at once, not when the failed export has cleaned up: a concurrent export of the
      // tenant must not be refused for bytes that are about to be deleted.
      const others = staged - this.mine;
      this.release();
      throw new StagingFullError(what, this.tenant, this.limitBytes, others);
    }
    this.counters.pending += n;
    this.mine += n;
  }

  /** The name of the committed export dir: it carries the bytes charged, so later counts need no walk. */
  committedName(): string {
    return `${randomBytes(8).toString('hex')}-${this.mine}`;
  }

  /** The export landed: its bytes stay counted (now on disk). Idempotent. */
  commit(): void {
    if (this.done) return;
    this.done = true;
    this.counters.pending -= this.mine;
    this.counters.committed += this.mine;
  }

  /** The export failed and left nothing: its bytes are no longer counted. Idempotent. */
  release(): void {
    if (this.done) return;
    this.done = true;
    this.counters.pending -= this.mine;
  }
}

/**
 * Bytes a tenant's staging dir holds: `staging/<tenant>/<session>/<user>/<export>`. Committed
 * exports count by their name; this ledger's own in-flight dirs are skipped; anything else is
 * walked (content + 512 bytes per entry). A missing dir holds nothing.
 */
async function stagedBytes(tenantDir: string, ownPartialPrefix: string): Promise<number> {
  let total = 0;
  for (const session of await entries(tenantDir)) {
    const sessionDir = join(tenantDir, session);
    if (!(await isPlainDir(sessionDir))) {
      total += await treeBytes(sessionDir);
      continue;
    }
    for (const user of await entries(sessionDir)) {
      const userDir = join(sessionDir, user);
      if (!(await isPlainDir(userDir))) {
        total += await treeBytes(userDir);
        continue;
      }
      for (const name of await entries(userDir)) {
        if (name.startsWith(ownPartialPrefix)) continue;
        const committed = EXPORT_DIR.exec(name);
        total += committed !== null ? Number(committed[1]) : await treeBytes(join(userDir, name));
      }
    }
  }
  return total;
}

async function entries(dir: string): Promise<string[]> {
  try {
    return await readdir(dir);
  } catch {
    return [];
  }
}

async function isPlainDir(p: string): Promise<boolean> {
  const st = await lstat(p).catch(() => undefined);
  return st !== undefined && st.isDirectory();
}

/** Content bytes plus 512 per entry of a tree, symlinks not followed; a vanished entry counts nothing. */
async function treeBytes(p: string): Promise<number> {
  const st = await lstat(p).catch(() => undefined);
  if (st === undefined) return 0;
  if (!st.isDirectory()) return ENTRY_BYTES + (st.isFile() ? st.size : 0);
  let total = ENTRY_BYTES;
  for (const name of await entries(p)) total += await treeBytes(join(p, name));
  return total;
}
