import { statfsSync } from 'node:fs';
import { totalmem } from 'node:os';
import type { TenantLimits } from '../config/types.js';
import type { TenantQuota } from './state/sandbox-table.js';
import type { SnapshotQuota } from './state/snapshot-table.js';

const MIB = 1024 * 1024;

/**
 * The bounds on the sandboxes one tenant holds, with the host-sized defaults filled in: memory
 * limits may add up to the host's memory, disk bounds to the size of the filesystem that holds
 * `BERTH_HOME` (where persistent sandboxes keep their files). So by default no single tenant can
 * reserve more than the machine has, whatever it opens.
 */
export function tenantQuota(limits: TenantLimits, berthHome: string): TenantQuota {
  return {
    sandboxes: limits.sandboxes,
    memoryMb: limits.memoryMb ?? Math.floor(totalmem() / MIB),
    diskMb: limits.diskMb ?? diskSizeMb(berthHome),
  };
}

/** The bounds on one tenant's snapshots: by default their bytes may add up to the size of the filesystem that holds `BERTH_HOME`. */
export function snapshotQuota(limits: TenantLimits, berthHome: string): SnapshotQuota {
  return { count: limits.snapshots, bytes: limits.snapshotBytes ?? diskSizeMb(berthHome) * MIB };
}

function diskSizeMb(path: string): number {
  const s = statfsSync(path);
  return Math.floor((s.blocks * s.bsize) / MIB);
}
