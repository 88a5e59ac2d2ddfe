import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, openSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Dockerode from 'dockerode';
import { loopDevicesUnder, unmountAllUnder } from './mounts.js';

/*
 * A second, private Docker engine whose storage driver caps a writable layer: dockerd with its own
 * socket, exec root and data root, the data root a btrfs filesystem on a loop-mounted image file
 * (`--storage-driver btrfs`; the driver turns quotas on when a container asks for a size). No
 * bridge and no iptables rules: its sandboxes run with `docker.network: none`. About 2 s to start.
 * It runs in a network namespace of its own: a dockerd started with `--bridge none` deletes the
 * host's `docker0` (it removes the default bridge it is told not to use), which broke every later
 * test whose containers use the shared engine's default bridge.
 */

const START_TIMEOUT_MS = 60_000;
const STOP_TIMEOUT_MS = 30_000;

/** Why this host cannot run the private engine, or undefined when it can. */
export function quotaEngineUnavailable(): string | undefined {
  if (process.getuid?.() !== 0) return 'it needs root (mount, dockerd)';
  for (const tool of ['dockerd', 'mkfs.btrfs', 'mount']) {
    try {
      execFileSync('sh', ['-c', `command -v ${tool}`], { stdio: 'ignore', env: { PATH: `${process.env['PATH'] ?? ''}:/usr/sbin:/sbin` } });
    } catch {
      return `${tool} is not installed${tool === 'mkfs.btrfs' ? ' (apt-get install btrfs-progs)' : ''}`;
    }
  }
  if (!/\bbtrfs\b/.test(readFileSync('/proc/filesystems', 'utf8'))) return 'this kernel has no btrfs';
  return undefined;
}

export class QuotaEngine {
  readonly docker: Dockerode;
  private constructor(readonly dir: string, readonly socket: string, private readonly child: ChildProcess) {
    this.docker = new Dockerode({ socketPath: socket });
  }

  /** Starts the engine on a btrfs filesystem of `sizeMb` and loads `image` into it from `from`. */
  static async start(from: Dockerode, image: string, sizeMb = 1024): Promise<QuotaEngine> {
    const dir = mkdtempSync(join(tmpdir(), 'berth-quota-'));
    const data = join(dir, 'data');
    const socket = join(dir, 'docker.sock');
    mkdirSync(data);
    execFileSync('truncate', ['-s', `${sizeMb}M`, join(dir, 'fs.img')]);
    execFileSync('mkfs.btrfs', ['-q', join(dir, 'fs.img')], { stdio: 'ignore' });
    execFileSync('mount', ['-o', 'loop', join(dir, 'fs.img'), data]);
    const log = openSync(join(dir, 'dockerd.log'), 'a');
    const child = spawn('unshare', ['--net', '--', 'dockerd',
      '--data-root', data, '--exec-root', join(dir, 'exec'), '--pidfile', join(dir, 'dockerd.pid'), '-H', `unix://${socket}`,
      '--storage-driver', 'btrfs', '--bridge', 'none', '--iptables=false', '--ip-masq=false',
    ], { stdio: ['ignore', log, log] });
    const engine = new QuotaEngine(dir, socket, child);
    try {
      const deadline = Date.now() + START_TIMEOUT_MS;
      while (!(existsSync(socket) && (await engine.docker.ping().then(() => true, () => false)))) {
        if (child.exitCode !== null || Date.now() > deadline) throw new Error(`the private dockerd did not answer: ${engine.logTail()}`);
        await new Promise((r) => setTimeout(r, 100));
      }
      await engine.docker.loadImage(await from.getImage(image).get());
      return engine;
    } catch (err) {
      await engine.stop();
      throw err;
    }
  }

  /** The data root's used bytes (what the host's disk gave this engine). */
  usedBytes(): number {
    const out = execFileSync('df', ['-B1', '--output=used', join(this.dir, 'data')], { encoding: 'utf8' });
    return Number(out.trim().split('\n').at(-1));
  }

  logTail(): string {
    const path = join(this.dir, 'dockerd.log');
    return existsSync(path) ? readFileSync(path, 'utf8').split('\n').slice(-15).join('\n') : '(no log)';
  }

  /** Removes its containers, stops the engine, takes down its mounts and deletes its dirs; what was left. */
  async stop(): Promise<string[]> {
    const left: string[] = [];
    for (const c of await this.docker.listContainers({ all: true }).catch(() => [])) {
      await this.docker.getContainer(c.Id).remove({ force: true }).catch(() => undefined);
      left.push(`container ${c.Id.slice(0, 12)}`);
    }
    if (this.child.exitCode === null) {
      const exited = new Promise((r) => this.child.once('exit', r));
      this.child.kill('SIGTERM');
      const timer = setTimeout(() => this.child.kill('SIGKILL'), STOP_TIMEOUT_MS);
      await exited;
      clearTimeout(timer);
    }
    unmountAllUnder(this.dir);
    left.push(...loopDevicesUnder(this.dir));
    rmSync(this.dir, { recursive: true, force: true });
    return left;
  }
}
