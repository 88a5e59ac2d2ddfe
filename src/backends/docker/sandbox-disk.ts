import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { chmod, mkdir, open, readFile, rm, stat } from 'node:fs/promises';
import path from 'node:path';
import { BerthError } from '../../errors.js';
import type { Logger } from '../../logging/logger.js';
import type { Lease } from '../backend.js';
import { mountsUnder } from './mount-table.js';

/*
 * A persistent sandbox's own dirs (home and workspace under $BERTH_HOME/sandboxes/docker/<dir>)
 * on a filesystem of their own: one sparse ext4 image per sandbox, `docker.diskMb` large,
 * loop-mounted at the sandbox's host dir before its container starts. A write past the bound
 * fails in the kernel (ENOSPC inside the sandbox) instead of waiting for berth's periodic check,
 * and the host never gives the two dirs more than the image's size. Only where berth can mount
 * (root, loop devices, mkfs.ext4, an engine on this host); elsewhere the dirs stay plain and the
 * periodic check alone bounds them.
 *
 * Images live in `<root>/.disks/<dir>.ext4` (a sandbox dir name never starts with a dot). The mount
 * follows the container: made (or made again after a reboot) before it starts, taken down when the
 * sandbox is removed, and by the orphan reaper when no container of this installation binds it (a
 * process that died between mount and create). Mount and create run under one lease per sandbox,
 * so the reaper never takes a mount down under a create.
 */

/** How a persistent sandbox's own dirs are bounded. */
export type OwnDirsBound = 'image' | 'periodic';

const MKFS_TIMEOUT_MS = 60_000;
const MOUNT_TIMEOUT_MS = 30_000;
const MIB = 1024 * 1024;
const IMAGE_SUFFIX = '.ext4';

export interface SandboxDisksOptions {
  /** berth's docker sandbox root (`$BERTH_HOME/sandboxes/docker`): each sandbox's host dir is a child. */
  root: string;
  lease: Lease;
  log: Logger;
  /** Who berth runs as and where the engine is: whether images can be made here (`imagesUnavailable`). */
  host: { uid: number | undefined; endpoint: string };
}

/**
 * Why persistent sandboxes cannot get a disk image here, or undefined when they can: berth must
 * be root (mount, loop devices), the engine must share this host's filesystem (a unix socket),
 * and the host needs loop devices and mkfs.ext4.
 *
 * @example
 * imagesUnavailable({ uid: 1000, endpoint: 'unix:///var/run/docker.sock' }) // → 'berth does not run as root (uid 1000)'
 */
export function imagesUnavailable(host: { uid: number | undefined; endpoint: string }): string | undefined {
  if (host.uid !== 0) return `berth does not run as root (uid ${host.uid ?? 'unknown'})`;
  if (!host.endpoint.startsWith('unix://')) return `the engine is not on this host (${host.endpoint})`;
  if (!existsSync('/dev/loop-control')) return 'this host has no loop devices (/dev/loop-control)';
  if (findTool('mkfs.ext4') === undefined) return 'mkfs.ext4 is not installed (e2fsprogs)';
  return undefined;
}

/** The disk images of one docker backend's persistent sandboxes. */
export class SandboxDisks {
  private readonly root: string;
  private readonly lease: Lease;
  private readonly log: Logger;
  private readonly host: { uid: number | undefined; endpoint: string };
  private reason: { why: string | undefined } | undefined;

  constructor(opts: SandboxDisksOptions) {
    this.root = path.resolve(opts.root);
    this.lease = opts.lease;
    this.log = opts.log;
    this.host = opts.host;
  }

  /** Why images cannot be made here (new sandboxes get plain dirs), or undefined; looked at once. */
  get unavailable(): string | undefined {
    this.reason ??= { why: imagesUnavailable(this.host) };
    return this.reason.why;
  }

  /** Runs `fn` holding the sandbox's disk lease: what mounts and creates, or takes a mount down, runs under it. */
  hold<T>(hostDir: string, fn: () => Promise<T>): Promise<T> {
    return this.lease(`docker-disk:${path.basename(hostDir)}`, fn);
  }

  /** The image file of the sandbox whose host dir is `hostDir`. */
  imageOf(hostDir: string): string {
    return path.join(this.root, '.disks', `${path.basename(hostDir)}${IMAGE_SUFFIX}`);
  }

  /**
   * Makes `hostDir` ready before its container starts (call under `hold`): its image mounted there
   * when it has one; a new sandbox (no host dir yet) gets an image of `sizeMb` where this host
   * can make one. A sandbox made before images (plain dirs), or where none can be made, stays
   * plain. An image that cannot be mounted is an error: starting on the empty dir below it would
   * hide the sandbox's files and leave its writes unbounded.
   */
  async attach(hostDir: string, sizeMb: number): Promise<OwnDirsBound> {
    const image = this.imageOf(hostDir);
    if (existsSync(image)) {
      if (!(await this.mounted(hostDir))) await this.mount(image, hostDir, `sandbox dir ${path.basename(hostDir)}`);
      return 'image';
    }
    if (existsSync(hostDir) || this.unavailable !== undefined) return 'periodic';
    try {
      await this.create(image, hostDir, sizeMb);
      return 'image';
    } catch (err) {
      // The periodic check still bounds plain dirs: a sandbox without an image is worse, not broken.
      this.log.debug(`warning: no disk image for ${path.basename(hostDir)} (its dirs get the periodic check only): ${(err as Error).message}`);
      await this.release(hostDir).catch(() => undefined);
      await rm(image, { force: true });
      return 'periodic';
    }
  }

  /** Takes the sandbox's mount down (lazily when busy); its image stays. Not mounted is success. */
  async release(hostDir: string): Promise<void> {
    if (!(await this.mounted(hostDir))) return;
    try {
      await run('umount', ['--', hostDir], MOUNT_TIMEOUT_MS);
    } catch (err) {
      // A host process (a file transfer) still in it: detach now, the kernel frees it when done.
      this.log.debug(`umount ${hostDir} failed (${(err as Error).message}); detaching it lazily`);
      await run('umount', ['-l', '--', hostDir], MOUNT_TIMEOUT_MS);
    }
  }

  /** The sandbox is being removed: its mount and its image go. */
  async destroy(hostDir: string): Promise<void> {
    // Only a sandbox dir of this root (the caller refuses anything else before deleting).
    if (path.dirname(path.resolve(hostDir)) !== this.root) return;
    await this.hold(hostDir, async () => {
      await this.release(hostDir);
      await rm(this.imageOf(hostDir), { force: true });
    });
  }

  /**
   * The orphan reaper's pass: takes down the image mounts at `hostDirs` that `isBound` (asked again
   * under each sandbox's lease, so a create under way keeps its mount) says no container uses.
   * Returns the host dirs released.
   */
  async releaseUnbound(hostDirs: readonly string[], isBound: (hostDir: string) => Promise<boolean>): Promise<string[]> {
    const released: string[] = [];
    for (const m of hostDirs) {
      await this.hold(m, async () => {
        if ((await isBound(m)) || !(await this.mounted(m))) return;
        await this.release(m);
        released.push(m);
      });
    }
    return released;
  }

  /** Host dirs under the root with an image of this backend mounted on them. */
  async imageMounts(): Promise<string[]> {
    const mounts = await mountsUnder(this.root);
    return mounts.filter((m) => path.dirname(m.target) === this.root && m.source.startsWith('/dev/loop')).map((m) => m.target);
  }

  /** Whether the sandbox's own image is mounted at `hostDir`; something else mounted there is an error. */
  private async mounted(hostDir: string): Promise<boolean> {
    const here = (await mountsUnder(hostDir)).filter((m) => m.target === hostDir);
    const top = here.at(-1);
    if (top === undefined) return false;
    const backing = await loopBackingFile(top.source);
    if (backing !== this.imageOf(hostDir)) {
      throw new BerthError('disk_image_failed', `${hostDir} has ${top.source}${backing ? ` (${backing})` : ''} mounted on it, not its disk image ${this.imageOf(hostDir)}; unmount it`);
    }
    return true;
  }

  /**
   * A new image: sparse (it takes host blocks only as the sandbox writes), ext4 without reserved
   * blocks (root inside gets no more than the bound), inode tables left unzeroed (a sparse file
   * reads as zeros), mounted nosuid,nodev (a setuid file planted there is inert on the host too).
   */
  private async create(image: string, hostDir: string, sizeMb: number): Promise<void> {
    await mkdir(path.dirname(image), { recursive: true, mode: 0o700 });
    const file = await open(image, 'wx', 0o600);
    try {
      await file.truncate(sizeMb * MIB);
    } finally {
      await file.close();
    }
    await run('mkfs.ext4', ['-q', '-F', '-m', '0', '-E', 'lazy_itable_init=1,lazy_journal_init=1,nodiscard', '--', image], MKFS_TIMEOUT_MS);
    await mkdir(hostDir, { recursive: true, mode: 0o700 });
    await this.mount(image, hostDir, `new sandbox dir ${path.basename(hostDir)}`);
    // The filesystem's root replaces the dir's mode: keep it berth's alone, as its other dirs are.
    await chmod(hostDir, 0o700);
  }

  private async mount(image: string, hostDir: string, what: string): Promise<void> {
    try {
      if (!(await stat(hostDir).then((s) => s.isDirectory(), () => false))) await mkdir(hostDir, { recursive: true, mode: 0o700 });
      await run('mount', ['-t', 'ext4', '-o', 'loop,nosuid,nodev,noinit_itable', '--', image, hostDir], MOUNT_TIMEOUT_MS);
    } catch (err) {
      throw new BerthError(
        'disk_image_failed',
        `could not mount the disk image ${image} of ${what} (${(err as Error).message}); berth mounts it as root before the sandbox starts: ` +
          'run berth as root on the engine\'s host, or remove the sandbox (berth rm with the same scope flags) to start it afresh',
        { cause: err },
      );
    }
  }
}

/** The file behind a loop device (`/dev/loop3`), or undefined when it is none. */
async function loopBackingFile(device: string): Promise<string | undefined> {
  const name = /^\/dev\/(loop\d+)$/.exec(device)?.[1];
  if (name === undefined) return undefined;
  const text = await readFile(`/sys/block/${name}/loop/backing_file`, 'utf8').catch(() => undefined);
  return text?.trim().replace(/ \(deleted\)$/, '');
}

function findTool(name: string): string | undefined {
  const dirs = [...(process.env['PATH'] ?? '').split(':'), '/usr/sbin', '/sbin'];
  return dirs.filter((d) => d.startsWith('/')).map((d) => path.join(d, name)).find((p) => existsSync(p));
}

function run(cmd: string, args: readonly string[], timeoutMs: number): Promise<void> {
  return new Promise((resolve, reject) => {
    execFile(cmd, args, { timeout: timeoutMs, env: { ...process.env, PATH: `${process.env['PATH'] ?? ''}:/usr/sbin:/sbin` } }, (err, _out, stderr) => {
      if (err) reject(new Error(`${cmd}: ${stderr.trim().split('\n').at(-1) || err.message}`));
      else resolve();
    });
  });
}
