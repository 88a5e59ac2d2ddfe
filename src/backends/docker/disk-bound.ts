import type { DockerSettings } from './settings.js';
import { engineMessage, statusOf } from './engine.js';
import { LIMIT_DEFAULTS } from './limits.js';

/*
 * Which part of a docker sandbox's disk bound (docker.diskMb) the kernel enforces here. Each part
 * gets the whole bound where the host can cap it: the writable layer through the engine's
 * storage quota (`StorageOpt size`), a persistent sandbox's home and workspace through a disk
 * image (sandbox-disk.ts). berth's periodic check (disk-usage.ts) still sums them, and is all
 * there is for a part nothing else caps; between two checks that part can overshoot by what the
 * sandbox writes in the meantime.
 */

/**
 * The start-up line saying how this installation's sandboxes are bounded. Pure.
 *
 * @example
 * describeDiskBound(docker, undefined, undefined, 'berth does not run as root (uid 1000)')
 * // → 'disk bound (docker.diskMb 10240 MiB): writable layers by the periodic check only (this engine's storage driver cannot cap them); …'
 */
export function describeDiskBound(
  settings: Pick<DockerSettings, 'diskMb'>,
  storageQuota: string | undefined,
  storageQuotaRefused: string | undefined,
  imagesUnavailable: string | undefined,
): string {
  const layer = storageQuota !== undefined && storageQuotaRefused === undefined
    ? `writable layers capped by the engine (${storageQuota} storage quota)`
    : `writable layers by the periodic check only (${storageQuotaRefused === undefined ? 'this engine\'s storage driver cannot cap them' : `the engine refused: ${storageQuotaRefused}`})`;
  const dirs = imagesUnavailable === undefined
    ? 'new persistent sandboxes\' home and workspace capped by a loop-mounted disk image each'
    : `persistent sandboxes' home and workspace by the periodic check only (${imagesUnavailable})`;
  return `disk bound (docker.diskMb ${settings.diskMb ?? LIMIT_DEFAULTS.diskMb} MiB): ${layer}; ${dirs}; the periodic check also bounds their sum`;
}

/** A create the engine refused for its `StorageOpt` (a driver that cannot cap a writable layer after all). */
export function isStorageOptRefusal(err: unknown): boolean {
  const status = statusOf(err);
  return status !== undefined && status >= 400 && /storage.?opt|quota/i.test(engineMessage(err));
}
