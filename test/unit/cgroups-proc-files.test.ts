import { describe, expect, it } from 'vitest';
import { parseCgroupMounts, parseNsPids, parseProcessCgroups } from '../../src/backends/cgroups/proc-files.js';

/*
 * The kernel's files berth reads to find a sandbox's cgroup from the host, as this machine (a
 * hybrid cgroup v1 host with the unified hierarchy beside) and a cgroup2-only host write them.
 */

const HYBRID_MOUNTINFO = [
  '35 26 0:30 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755',
  '36 35 0:31 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 rw,nsdelegate',
  '39 35 0:34 / /sys/fs/cgroup/pids rw,nosuid,nodev,noexec,relatime shared:15 - cgroup cgroup rw,pids',
  '40 35 0:35 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime shared:16 - cgroup cgroup rw,cpu,cpuacct',
  // A container's view of its own cgroup, bound from a subtree: not a hierarchy's root.
  '612 600 0:34 /docker/abc /sys/fs/cgroup/pids ro,nosuid - cgroup cgroup rw,pids',
].join('\n');

const V2_MOUNTINFO = [
  '24 30 0:22 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw',
  '30 24 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot',
].join('\n');

describe('cgroup mounts (/proc/self/mountinfo)', () => {
  it('finds the unified hierarchy beside the v1 ones on a hybrid host, and each v1 controller', () => {
    const m = parseCgroupMounts(HYBRID_MOUNTINFO);
    expect(m.unified).toBe('/sys/fs/cgroup/unified');
    expect(m.v1.get('pids')).toBe('/sys/fs/cgroup/pids');
    expect(m.v1.get('cpuacct')).toBe('/sys/fs/cgroup/cpu,cpuacct');
    expect(m.v1.has('rw')).toBe(false);
  });

  it('finds /sys/fs/cgroup on a cgroup2-only host, and no v1 hierarchy', () => {
    const m = parseCgroupMounts(V2_MOUNTINFO);
    expect(m.unified).toBe('/sys/fs/cgroup');
    expect(m.v1.size).toBe(0);
  });

  it('ignores a bind of a subtree, and undoes the octal escapes of a mount point', () => {
    const m = parseCgroupMounts([
      '70 60 0:26 /system.slice /mnt/sub rw - cgroup2 cgroup2 rw',
      '71 60 0:26 / /mnt/with\\040space rw - cgroup2 cgroup2 rw',
    ].join('\n'));
    expect(m.unified).toBe('/mnt/with space');
  });

  it('has no unified hierarchy on a v1-only host', () => {
    expect(parseCgroupMounts('39 35 0:34 / /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids').unified).toBeUndefined();
  });
});

describe('a process\'s cgroups (/proc/PID/cgroup)', () => {
  it('reads the cgroup2 path and the v1 paths by controller (docker on a hybrid host)', () => {
    const c = parseProcessCgroups('9:name=systemd:/docker/9b14\n8:pids:/docker/9b14\n1:cpu,cpuacct:/docker/9b14\n0::/docker/9b14\n');
    expect(c.unified).toBe('/docker/9b14');
    expect(c.v1.get('pids')).toBe('/docker/9b14');
    expect(c.v1.get('cpuacct')).toBe('/docker/9b14');
  });

  it('reads a systemd scope path with colons nowhere but the separators', () => {
    expect(parseProcessCgroups('0::/system.slice/docker-9b14.scope\n').unified).toBe('/system.slice/docker-9b14.scope');
  });
});

describe('a process\'s pids in nested namespaces (NSpid)', () => {
  it('lists them outermost first; absent on a kernel without the line', () => {
    expect(parseNsPids('Name:\tbash\nNSpid:\t25835\t1\nNSpgid:\t25835\t1\n')).toEqual([25835, 1]);
    expect(parseNsPids('Name:\tbash\nNSpid:\t4242\n')).toEqual([4242]);
    expect(parseNsPids('Name:\tbash\n')).toEqual([]);
  });
});
