import { statfsSync } from 'node:fs';
import { totalmem } from 'node:os';
import type { SandboxReservation } from '../backends/module.js';
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
 * that holds `BERTH_HOME` (where persistent sandboxes keep their files), but never less than the
 * largest one sandbox of the config reserves (`largest`), so a small host still gets one sandbox
 * per tenant. Written limits win.
 */
export function tenantQuota(limits: TenantLimits, berthHome: string, largest: SandboxReservation = {}): TenantQuota {
  return {
    sandboxes: limits.sandboxes,
    memoryMb: limits.memoryMb ?? Math.max(Math.floor((totalmem() / MIB) * DEFAULT_TENANT_SHARE), largest.memoryMb ?? 0),
    diskMb: limits.diskMb ?? Math.max(Math.floor(diskSizeMb(berthHome) * DEFAULT_TENANT_SHARE), largest.diskMb ?? 0),
  };
}

/** The most memory and disk one sandbox of any of `reservations` reserves (each its own largest). */
export function largestReservation(reservations: readonly SandboxReservation[]): SandboxReservation {
  return {
    memoryMb: Math.max(0, ...reservations.map((r) => r.memoryMb ?? 0)),
    diskMb: Math.max(0, ...reservations.map((r) => r.diskMb ?? 0)),
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
