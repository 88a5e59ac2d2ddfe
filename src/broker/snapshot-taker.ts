import { randomBytes } from 'node:crypto';
import type { ForbiddenValue, SnapshotBudget, SnapshotCapability } from '../backends/backend.js';
import { BerthError, UsageError } from '../errors.js';
import type { LiveSandbox, LiveSandboxes } from './live-sandboxes.js';
import type { JobActivity } from './reapers.js';
import type { ResolvedCall } from './resolve-call.js';
import { pidOf, type SandboxHolders } from './sandbox-holders.js';
import type { ScopeRecords } from './state/scope-records.js';
import type { SnapshotQuota, SnapshotRecord, SnapshotTable } from './state/snapshot-table.js';

export interface SnapshotTakerOptions {
  lives: Pick<LiveSandboxes, 'get' | 'forget' | 'underLock'>;
  snapshots: Pick<SnapshotTable, 'reserve' | 'complete' | 'delete' | 'usage' | 'claimBytes'>;
  /** The tenant bounds on snapshots, host defaults filled in. */
  snapshotQuota: SnapshotQuota;
  scopes: Pick<ScopeRecords, 'getCwd'>;
  /** Whether a background job runs in a sandbox (then no snapshot is made of it). */
  jobs: JobActivity;
  /** Another live berth process holding a sandbox (it may run a command there): then it is neither snapshotted nor restored. */
  holders: Pick<SandboxHolders, 'other'>;
}

/**
 * Takes a snapshot of a call's sandbox while it is idle (no command, no shell's background job, no
 * job, no other berth process holding it), within the tenant's count and byte limits; the snapshot
 * never holds a value of a secret the call was granted. Also says whether a sandbox is idle enough
 * to be replaced (a restore).
 */
export class SnapshotTaker {
  constructor(private readonly opts: SnapshotTakerOptions) {}

  /**
   * Under the identity's lock: refused while the sandbox is busy; its shells close (their state
   * saved in it; calls that come meanwhile wait for the lock and bring it up again after), then
   * the backend saves it. Counted against the tenant's limits before and after it is made.
   */
  take(call: ResolvedCall, caps: SnapshotCapability, what: Pick<SnapshotRecord, 'name' | 'kind' | 'baseOf'>): Promise<SnapshotRecord> {
    const { lives, snapshots, snapshotQuota } = this.opts;
    return lives.underLock(call.spec.digest, async () => {
      const live = lives.get(call.spec.digest);
      if (live === undefined) throw new BerthError('sandbox_busy', `sandbox "${call.binding.sandboxKey}" went down while the snapshot began; try again`);
      await this.assertIdle(call, live, 'snapshotted');
      const cwd = this.opts.scopes.getCwd(call.shell.digest)?.cwd ?? null;
      const rec: SnapshotRecord = {
        id: randomBytes(12).toString('hex'), tenant: call.scope.tenant, user: call.scope.user ?? null, profile: call.scope.profile,
        session: call.scope.session ?? null, digest: call.spec.digest, sandboxKey: call.binding.sandboxKey, ...what,
        backend: call.settings.backend, ref: '', bytes: 0, createdMs: Date.now(), cwd, shellStem: call.shell.fileStem,
      };
      const reserved = snapshots.reserve(rec, snapshotQuota);
      if (reserved === 'taken') throw new UsageError(`sandbox "${call.binding.sandboxKey}" already has a snapshot "${rec.name}"; pick another name or remove it first (berth snapshot rm)`);
      if (reserved === 'over') throw this.overLimit(call.scope.tenant);
      try {
        await lives.forget(live);
        const made = await caps.create(live.sandbox, rec.id, forbiddenOf(call), this.budgetOf(call.scope.tenant, rec.id));
        if (!snapshots.complete(rec.id, made.ref, made.bytes, snapshotQuota.bytes)) {
          await caps.remove(made.ref).catch(() => undefined);
          throw this.overLimit(call.scope.tenant, made.bytes);
        }
        return { ...rec, ref: made.ref, bytes: made.bytes };
      } catch (err) {
        snapshots.delete(rec.tenant, rec.id);
        throw err;
      }
    });
  }

  /** A snapshot's call runs on an idle sandbox: no command, no shell's background job, no job. */
  async assertIdle(call: ResolvedCall, live: LiveSandbox, verb: string): Promise<void> {
    this.assertNotHeldElsewhere(call, verb);
    if (live.inflight > 0 || (await live.shells.busy())) throw busy(call, verb, 'a command or a background job runs in it (one its shell lists, or a process a command left running: a daemon too)');
    if (await this.opts.jobs.activeIn(live.digest, live.sandbox).catch(() => true)) throw busy(call, verb, 'a job runs in it (berth jobs)');
  }

  /** A snapshot or restore stops or replaces the sandbox: refused while another live berth process holds it. */
  assertNotHeldElsewhere(call: ResolvedCall, verb: string): void {
    const other = this.opts.holders.other(call.spec.digest);
    if (other !== undefined) throw busy(call, verb, `another berth process (pid ${pidOf(other)}) holds it and may be running a command in it`);
  }

  /**
   * What snapshot `id` of `tenant` may take: the rest of its `limits.snapshotBytes`, each part
   * claimed in its reserved row before it is copied (so concurrent snapshots cannot each take it all).
   */
  private budgetOf(tenant: string, id: string): SnapshotBudget {
    const q = this.opts.snapshotQuota.bytes;
    const maxBytes = Math.max(0, q - this.opts.snapshots.usage(tenant).bytes);
    return {
      maxBytes,
      limit: `tenant "${tenant}" may keep ${maxBytes} more bytes of snapshots, limits.snapshotBytes = ${q}`,
      claim: (bytes) => this.opts.snapshots.claimBytes(id, bytes, q),
    };
  }

  private overLimit(tenant: string, adding?: number): BerthError {
    const { count, bytes } = this.opts.snapshots.usage(tenant);
    const q = this.opts.snapshotQuota;
    const what = adding === undefined && count >= q.count
      ? `tenant "${tenant}" keeps ${count} snapshots, its limit (limits.snapshots = ${q.count})`
      : `tenant "${tenant}"'s snapshots take ${bytes} bytes${adding === undefined ? '' : ` and this one ${adding}`}, past its limit (limits.snapshotBytes = ${q.bytes})`;
    return new BerthError('tenant_limit', `snapshot not made: ${what}; remove snapshots (berth snapshot rm NAME) or raise the limit`);
  }
}

/**
 * The values no snapshot may hold: the secrets the call was granted, and its credentials' real
 * values (never put in the sandbox, but a credential host that echoes a request's header back
 * puts one there).
 */
function forbiddenOf(call: ResolvedCall): ForbiddenValue[] {
  const granted = call.secretNames.flatMap((name) => {
    const value = call.env[name];
    return value === undefined || value === '' ? [] : [{ name, value }];
  });
  return [...granted, ...(call.egress?.credentials ?? []).map((c) => ({ name: c.name, value: c.value, credential: true }))];
}

/** The refusal of a snapshot, restore or fork while the sandbox is in use, saying why and what to do. */
export function busy(call: ResolvedCall, verb: string, why: string): BerthError {
  return new BerthError('sandbox_busy', `sandbox "${call.binding.sandboxKey}" cannot be ${verb} now: ${why}; wait for it to end (or kill it), then try again`);
}
