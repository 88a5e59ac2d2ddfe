import { randomBytes } from 'node:crypto';
import type { Lease } from '../backends/backend.js';
import { TimeoutError } from '../errors.js';
import { KeyedLock } from '../kit/keyed-lock.js';
import { ownerAlive, ownerToken } from '../kit/process-owner.js';
import type { LeaseTable } from './state/lease-table.js';

const POLL_MS = 25;

/**
 * A lease across the processes of one installation, kept in its state store: the callers of this
 * process queue on an in-process lock, then take the store's row (a holder that died is replaced).
 *
 * @example
 * const lease = storeLease(store.leases);
 * await lease('docker-network:berth-net-…-0', () => createIfMissing());
 */
export function storeLease(leases: Pick<LeaseTable, 'take' | 'release'>, opts: { waitMs?: number } = {}): Lease {
  const local = new KeyedLock();
  const waitMs = opts.waitMs ?? 30_000;
  return <T>(name: string, fn: () => Promise<T>): Promise<T> => local.run(name, async () => {
    const owner = `${ownerToken()}:${randomBytes(6).toString('hex')}`;
    const deadline = Date.now() + waitMs;
    while (!leases.take(name, owner, Date.now(), (holder) => !ownerAlive(holder))) {
      if (Date.now() > deadline) {
        throw new TimeoutError(`lease "${name}" is held by another berth process of this installation for over ${waitMs / 1000} s; retry, or check that process`);
      }
      await new Promise((r) => setTimeout(r, POLL_MS));
    }
    try {
      return await fn();
    } finally {
      leases.release(name, owner);
    }
  });
}
