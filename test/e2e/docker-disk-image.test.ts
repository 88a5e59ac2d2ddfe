import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { expect, it } from 'vitest';
import { localLease } from '../../src/backends/docker/networks.js';
import { SandboxDisks } from '../../src/backends/docker/sandbox-disk.js';
import { Logger } from '../../src/logging/logger.js';
import type { CallScopeInput } from '../../src/scope/call-scope.js';
import { containerFor, describeDocker, docker, dockerConfig, dockerSuiteHooks, installs, type TestInstall } from '../helpers/docker-e2e.js';
import { loopDevicesUnder, mountsUnder } from '../helpers/mounts.js';

/*
 * A persistent docker sandbox's own dirs (home and workspace under BERTH_HOME) on a loop-mounted
 * ext4 image of docker.diskMb: a write past the bound fails in the kernel, inside the sandbox, and
 * the host never gives more. Every test checks `mount` and `losetup -a` for what it left.
 */

const reg = installs('berth-disk-');
const MIB = 1024 * 1024;
const BOUND_MB = 64;

function sandboxRoot(t: TestInstall): string {
  return join(t.home, 'sandboxes', 'docker');
}

/** The sandbox dirs with an image (`<root>/.disks/<dir>.ext4`). */
function images(t: TestInstall): string[] {
  const dir = join(sandboxRoot(t), '.disks');
  return existsSync(dir) ? readdirSync(dir) : [];
}

function mountOptions(target: string): string {
  return execFileSync('findmnt', ['-n', '-o', 'OPTIONS', '--mountpoint', target], { encoding: 'utf8' }).trim();
}

const persistent = { scope: 'session', persistent: true, docker: { diskMb: BOUND_MB } };
const fill = (file: string): string => `dd if=/dev/zero of=${file} bs=1M count=${BOUND_MB * 2} 2>&1 | grep -o 'No space left on device' | head -n 1; du -sm ${file} | cut -f1`;

function leftUnder(t: TestInstall): { mounts: string[]; loops: string[]; images: string[] } {
  return { mounts: mountsUnder(t.home), loops: loopDevicesUnder(t.home), images: images(t) };
}

describeDocker('docker: a persistent sandbox\'s own dirs on a disk image of docker.diskMb', () => {
  dockerSuiteHooks(reg);

  it('a write past the bound fails at the bound in /workspace and /root, the host gives no more, and remove leaves nothing', async () => {
    const t = reg.track();
    const b = await t.open(dockerConfig(persistent));
    const s: CallScopeInput = { session: 'full' };
    expect((await b.exec(s, 'echo up')).stdout).toBe('up\n');
    const [hostDir] = mountsUnder(sandboxRoot(t));
    expect(hostDir, JSON.stringify(leftUnder(t))).toBeDefined();
    expect(loopDevicesUnder(t.home)).toHaveLength(1);
    // A setuid file or a device node the sandbox makes there is inert on the host too.
    expect(mountOptions(hostDir!)).toMatch(/(^|,)nosuid(,|$)/);
    expect(mountOptions(hostDir!)).toMatch(/(^|,)nodev(,|$)/);

    const ws = await b.exec(s, fill('/workspace/big'));
    const [wsError, wsMb] = ws.stdout.trim().split('\n');
    expect(wsError, ws.output).toBe('No space left on device');
    expect(Number(wsMb)).toBeGreaterThan(BOUND_MB / 2);
    expect(Number(wsMb)).toBeLessThanOrEqual(BOUND_MB);
    // Home shares the image: the same bound, counted together with the workspace.
    const home = await b.exec(s, `rm /workspace/big; ${fill('/root/big')}`);
    expect(home.stdout.trim().split('\n')[0], home.output).toBe('No space left on device');
    const image = join(sandboxRoot(t), '.disks', images(t)[0]!);
    expect(statSync(image).size).toBe(BOUND_MB * MIB);
    expect(statSync(image).blocks * 512).toBeLessThanOrEqual(BOUND_MB * MIB);
    // The kernel stopped it under its bound: the check stops nothing, and with its disk still full
    // (berth's shell state lives in /root too) the shell keeps its cwd and variables.
    expect(await b.reapers.enforceDiskLimits()).toEqual([]);
    expect((await b.exec(s, 'cd /workspace && export KEPT=yes; echo set')).stdout).toBe('set\n');
    expect((await b.exec(s, 'echo "$KEPT $(pwd)"; rm /root/big; echo fine > f; cat f')).stdout).toBe('yes /workspace\nfine\n');
    // Links planted to host paths are removed as links: the remove never follows them.
    expect((await b.exec(s, 'ln -s /etc /workspace/etc-link && ln -s / /root/root-link && echo linked')).stdout).toBe('linked\n');

    expect(await b.removeSandboxOf(s)).toBe(true);
    expect(existsSync('/etc/passwd')).toBe(true);
    expect(leftUnder(t)).toEqual({ mounts: [], loops: [], images: [] });
    expect(existsSync(hostDir!)).toBe(false);
  });

  it('after a host reboot (stopped, unmounted) the image is mounted again before the sandbox starts, with its files; two brokers share one loop device', async () => {
    const t = reg.track();
    const s: CallScopeInput = { session: 'reboot' };
    const first = await t.open(dockerConfig(persistent));
    expect((await first.exec(s, 'echo kept > /workspace/kept; echo home > /root/h; echo ok')).stdout).toBe('ok\n');
    const c = await containerFor(t.installation, 'session:reboot');
    const [hostDir] = mountsUnder(sandboxRoot(t));
    await first.close();
    await docker.getContainer(c.id).stop({ t: 1 });
    execFileSync('umount', ['--', hostDir!]);
    expect(leftUnder(t).mounts).toEqual([]);

    const a = await t.open(dockerConfig(persistent));
    const bb = await t.open(dockerConfig(persistent));
    const [ra, rb] = await Promise.all([a.exec(s, 'cat /workspace/kept /root/h'), bb.exec(s, 'cat /workspace/kept')]);
    expect(ra.stdout, ra.output).toBe('kept\nhome\n');
    expect(rb.stdout, rb.output).toBe('kept\n');
    expect(mountsUnder(sandboxRoot(t))).toEqual([hostDir]);
    expect(loopDevicesUnder(t.home)).toHaveLength(1);
    // The bound holds after the mount came back.
    expect((await a.exec(s, fill('/workspace/big'))).stdout.split('\n')[0]).toBe('No space left on device');

    expect(await a.removeSandboxOf(s)).toBe(true);
    expect(leftUnder(t)).toEqual({ mounts: [], loops: [], images: [] });
  });

  it('the orphan reaper takes down a mount no container binds (a process that died between mount and create) and keeps the ones in use', async () => {
    const t = reg.track();
    const b = await t.open(dockerConfig(persistent));
    const live: CallScopeInput = { session: 'live' };
    expect((await b.exec(live, 'echo x > /workspace/x; echo up')).stdout).toBe('up\n');
    const [liveDir] = mountsUnder(sandboxRoot(t));
    // What a berth process that died right after mounting leaves: an image mounted, no container.
    const disks = new SandboxDisks({
      root: sandboxRoot(t), lease: localLease(), log: Logger.silent(), host: { uid: process.getuid?.(), endpoint: 'unix:///var/run/docker.sock' },
    });
    const crashed = join(sandboxRoot(t), 'session_crashed-0123456789ab');
    expect(await disks.attach(crashed, BOUND_MB)).toBe('image');
    expect(mountsUnder(sandboxRoot(t)).sort()).toEqual([liveDir, crashed].sort());
    expect(loopDevicesUnder(t.home)).toHaveLength(2);

    await b.reapers.reapOrphans();
    expect(mountsUnder(sandboxRoot(t))).toEqual([liveDir]);
    expect(loopDevicesUnder(t.home)).toHaveLength(1);
    expect((await b.exec(live, 'cat /workspace/x')).stdout).toBe('x\n');
    // Its image stays: the identity's next call mounts it again (and `berth rm` removes it).
    expect(await disks.attach(crashed, BOUND_MB)).toBe('image');
    await disks.destroy(crashed);

    expect(await b.removeSandboxOf(live)).toBe(true);
    expect(leftUnder(t)).toEqual({ mounts: [], loops: [], images: [] });
  });

  it('a sandbox made before images (plain dirs) stays plain, bounded by the periodic check', async () => {
    const t = reg.track();
    const b = await t.open(dockerConfig(persistent));
    // The `default` key's host dir (named after the key) exists without an image, as an older berth left it.
    const s: CallScopeInput = {};
    const plain = join(sandboxRoot(t), 'default');
    execFileSync('mkdir', ['-p', join(plain, 'home'), join(plain, 'workspace')]);
    expect((await b.exec(s, `dd if=/dev/zero of=/workspace/big bs=1M count=${BOUND_MB + 16} 2>/dev/null && echo wrote`)).stdout).toBe('wrote\n');
    expect(leftUnder(t)).toEqual({ mounts: [], loops: [], images: [] });
    expect(await b.reapers.enforceDiskLimits()).toEqual(['default']);
    expect(await b.exec(s, 'echo again').catch((e: unknown) => e)).toMatchObject({ code: 'disk_limit_exceeded' });
    expect(await b.removeSandboxOf(s)).toBe(true);
  });
});
