import type { CallScopeInput } from '../scope/call-scope.js';
import type { SnapshotCalls } from './snapshot-calls.js';
import type { RestoreResult, SnapshotInfo } from './snapshot-info.js';

/**
 * `broker.snapshots` bound to one scope (see `SnapshotCalls` for each call): checkpoints of the
 * session's sandbox, and going back to one.
 *
 * @example
 * await chat.snapshots.create({ name: 'before-upgrade' });
 * const r = await chat.exec('apt-get upgrade -y');
 * if (r.exitCode !== 0) await chat.snapshots.restore('before-upgrade');
 */
export class SessionSnapshots {
  constructor(private readonly snapshots: SnapshotCalls, private readonly scope: CallScopeInput) {}

  create(a: { name?: string } = {}): Promise<SnapshotInfo> {
    return this.snapshots.create(this.scope, a);
  }

  /** The snapshots of the session's sandbox, oldest first. */
  list(): SnapshotInfo[] {
    const tenant = this.snapshots.tenantOf(this.scope);
    return this.snapshots.list(tenant, this.scope);
  }

  remove(name: string): Promise<boolean> {
    return this.snapshots.remove(this.scope, name);
  }

  restore(name: string): Promise<RestoreResult> {
    return this.snapshots.restore(this.scope, name);
  }
}
