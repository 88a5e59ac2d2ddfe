import { statfsSync } from 'node:fs';
import { totalmem } from 'node:os';
import type { TenantLimits } from '../config/types.js';
import type { TenantQuota } from './state/sandbox-table.js';
import type { SnapshotQuota } from './state/snapshot-table.js';

const MIB = 1024 * 1024;

/**
 * The share of the host one tenant may reserve by default: memory limits, disk bounds and
 * snapshots each add up to at most half of what the machine has, so one tenant alone can never
 * reserve all of it, and what it holds leaves the rest to the others and to the host itself.
 */
const DEFAULT_TENANT_SHARE = 0.5;

/**
 * The bounds on the sandboxes one tenant holds, with the host-sized defaults filled in: memory
 * limits may add up to half the host's memory, disk bounds to half the size of the filesystem
 * that holds `BERTH_HOME` (where persistent sandboxes keep their files). Written limits win.
 */
export function tenantQuota(limits: TenantLimits, berthHome: string): TenantQuota {
  return {
    sandboxes: limits.sandboxes,
    memoryMb: limits.memoryMb ?? Math.floor((totalmem() / MIB) * DEFAULT_TENANT_SHARE),
    diskMb: limits.diskMb ?? Math.floor(diskSizeMb(berthHome) * DEFAULT_TENANT_SHARE),
  };
}

/** The bounds on one tenant's snapshots: by default their bytes may add up to half the size of the filesystem that holds `BERTH_HOME`. */
export function snapshotQuota(limits: TenantLimits, berthHome: string): SnapshotQuota {
  return { count: limits.snapshots, bytes: limits.snapshotBytes ?? Math.floor(diskSizeMb(berthHome) * DEFAULT_TENANT_SHARE) * MIB };
}

function diskSizeMb(path: string): number {
  const s = statfsSync(path);
  return Math.floor((s.blocks * s.bsize) / MIB);
}
