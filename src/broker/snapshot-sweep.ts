import type { SnapshotCalls } from './snapshot-calls.js';
import type { BackendByName } from './sandbox-removal.js';
import type { SandboxTable } from './state/sandbox-table.js';
import type { SnapshotRecord, SnapshotTable } from './state/snapshot-table.js';
import type { Logger } from '../logging/logger.js';

const DAY_MS = 24 * 60 * 60 * 1000;
/** A snapshot still without a ref this long after it was reserved was abandoned by a process that died making it. */
const PENDING_ABANDONED_MS = 60 * 60 * 1000;

export interface SnapshotSweepOptions {
  snapshots: Pick<SnapshotTable, 'all' | 'delete'>;
  sandboxes: Pick<SandboxTable, 'get'>;
  calls: Pick<SnapshotCalls, 'removeSnapshot'>;
  backends: BackendByName;
  /** The backends the config uses: their snapshots are the ones the orphan pass looks at. */
  backendNames: readonly string[];
  /** `limits.snapshotRetentionDays`. */
  retentionDays: number;
  log: Logger;
}

/**
 * What the periodic sweep does to snapshots: a named one past its tenant's retention goes, a
 * fork's base goes once the forked sandbox's record is gone, a reservation abandoned by a dead
 * process goes, a removed one whose storage its backend kept is freed once it can, and a
 * backend snapshot that no record names (an orphan of a crash between the
 * backend's save and the record) is removed. Returns the ids or refs removed.
 */
export class SnapshotSweep {
  constructor(private readonly opts: SnapshotSweepOptions) {}

  async sweep(nowMs: number = Date.now()): Promise<string[]> {
    const { snapshots, sandboxes, calls, log } = this.opts;
    const removed: string[] = [];
    const all = snapshots.all();
    const expired = (s: SnapshotRecord) => s.kind === 'named' && s.ref !== '' && nowMs - s.createdMs > this.opts.retentionDays * DAY_MS;
    const baseless = (s: SnapshotRecord) => s.kind === 'base' && s.ref !== '' && s.baseOf !== null && sandboxes.get(s.baseOf) === undefined;
    // Removed, its storage kept by its backend (a fork used it): freed once the backend can.
    const gone = (s: SnapshotRecord) => s.kind === 'gone' && s.ref !== '';
    for (const s of all) {
      if (s.ref === '' && nowMs - s.createdMs > PENDING_ABANDONED_MS) {
        snapshots.delete(s.tenant, s.id);
        removed.push(s.id);
      } else if (expired(s) || baseless(s) || gone(s)) {
        await calls.removeSnapshot(s).then(() => removed.push(s.id), (e: unknown) => log.child('berth:snapshots').warn(`remove snapshot ${s.name} of ${s.sandboxKey}: ${String(e)}`));
      }
    }
    for (const name of this.opts.backendNames) {
      const caps = (await this.opts.backends.get(name).catch(() => undefined))?.snapshots;
      if (caps === undefined) continue;
      const refs = await caps.list().catch((e: unknown) => {
        log.child('berth:snapshots').warn(`list ${name} snapshots: ${String(e)}`);
        return [];
      });
      // Read after the listing: a snapshot being made (of any process) has its backend ref before
      // its record does, and its reservation was there before the backend began; no pass then.
      const now = snapshots.all();
      if (now.some((s) => s.ref === '')) return removed;
      const known = new Set(now.map((s) => s.ref));
      for (const ref of refs.filter((r) => !known.has(r))) {
        await caps.remove(ref).then(() => removed.push(ref), (e: unknown) => log.child('berth:snapshots').warn(`remove orphan snapshot ${ref}: ${String(e)}`));
      }
    }
    return removed;
  }
}
