import { describe, expect, it } from 'vitest';
import { describeDiskBound, isStorageOptRefusal } from '../../src/backends/docker/disk-bound.js';
import { capabilitiesFromInfo, planLimits } from '../../src/backends/docker/limits.js';
import { parseMountInfo } from '../../src/backends/docker/mount-table.js';
import { imagesUnavailable } from '../../src/backends/docker/sandbox-disk.js';
import { dockerSettings } from '../helpers/docker.js';

/* Which parts of docker.diskMb the kernel enforces: the pure decisions. */

const overlayOn = (backing: string): Record<string, unknown> => ({ Driver: 'overlay2', DriverStatus: [['Backing Filesystem', backing], ['Supports d_type', 'true']] });

describe('docker disk bound: what the engine and the host can cap', () => {
  it('reads from GET /info whether the storage driver can cap a writable layer', () => {
    expect(capabilitiesFromInfo({ Driver: 'btrfs' }).storageQuota).toBe('btrfs');
    expect(capabilitiesFromInfo({ Driver: 'zfs' }).storageQuota).toBe('zfs');
    expect(capabilitiesFromInfo(overlayOn('xfs')).storageQuota).toBe('overlay2 on xfs');
    expect(capabilitiesFromInfo(overlayOn('extfs')).storageQuota).toBeUndefined();
    expect(capabilitiesFromInfo({}).storageQuota).toBeUndefined();
  });

  it('sets StorageOpt size from docker.diskMb (the default when unset) only where the driver can cap', () => {
    const caps = capabilitiesFromInfo({ ...overlayOn('extfs'), MemoryLimit: true });
    expect(planLimits(dockerSettings({ diskMb: 64 }), caps).hostConfig.StorageOpt).toBeUndefined();
    expect(planLimits(dockerSettings({ diskMb: 64 }), { ...caps, storageQuota: 'btrfs' }).hostConfig.StorageOpt).toEqual({ size: '64M' });
    expect(planLimits(dockerSettings(), { ...caps, storageQuota: 'btrfs' }).hostConfig.StorageOpt).toEqual({ size: '10240M' });
  });

  it('tells a create refused for its StorageOpt from other failures', () => {
    const refused = { statusCode: 500, json: { message: "--storage-opt is supported only for overlay over xfs with 'pquota' mount option" } };
    expect(isStorageOptRefusal(refused)).toBe(true);
    expect(isStorageOptRefusal({ statusCode: 404, json: { message: 'No such image: x' } })).toBe(false);
    expect(isStorageOptRefusal(Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' }))).toBe(false);
  });

  it('says at start-up which part the kernel caps and why not', () => {
    expect(describeDiskBound({ diskMb: 64 }, 'btrfs', undefined, undefined)).toBe(
      'disk bound (docker.diskMb 64 MiB): writable layers capped by the engine (btrfs storage quota); ' +
        'new persistent sandboxes\' home and workspace capped by a loop-mounted disk image each; the periodic check also bounds their sum',
    );
    const none = describeDiskBound({ diskMb: undefined }, undefined, undefined, 'berth does not run as root (uid 1000)');
    expect(none).toMatch(/^disk bound \(docker\.diskMb 10240 MiB\): writable layers by the periodic check only \(this engine's storage driver cannot cap them\); /);
    expect(none).toMatch(/home and workspace by the periodic check only \(berth does not run as root \(uid 1000\)\)/);
    expect(describeDiskBound({ diskMb: 1 }, 'overlay2 on xfs', 'no pquota', undefined)).toMatch(/periodic check only \(the engine refused: no pquota\)/);
  });

  it('makes images only as root, for an engine on this host', () => {
    expect(imagesUnavailable({ uid: 1000, endpoint: 'unix:///var/run/docker.sock' })).toBe('berth does not run as root (uid 1000)');
    expect(imagesUnavailable({ uid: 0, endpoint: 'tcp://build1:2375' })).toBe('the engine is not on this host (tcp://build1:2375)');
  });

  it('parses /proc/self/mountinfo, octal escapes and optional fields included', () => {
    const text = [
      '36 35 98:0 / /mnt1 rw,noatime master:1 - ext3 /dev/root rw,errors=continue',
      '90 24 7:3 / /home/a\\040b/sandboxes/docker/default rw,nosuid,nodev,relatime shared:5 - ext4 /dev/loop3 rw',
      'garbage',
    ].join('\n');
    expect(parseMountInfo(text)).toEqual([
      { target: '/mnt1', source: '/dev/root', fstype: 'ext3' },
      { target: '/home/a b/sandboxes/docker/default', source: '/dev/loop3', fstype: 'ext4' },
    ]);
  });
});
