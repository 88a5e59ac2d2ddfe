import { spawn } from 'node:child_process';
import { mkdirSync, rmSync } from 'node:fs';
import { join, resolve, sep } from 'node:path';
import type { Readable } from 'node:stream';
import type { ProfileSettings } from '../../config/types.js';
import {
  helperOutputCap,
  helperOutputTooLarge,
  type Backend,
  type ExecOnceOptions,
  type ExecOnceResult,
  type ManagedSandbox,
  type Sandbox,
  type SandboxSpec,
  type ShellTransport,
} from '../backend.js';
import type { Logger } from '../../logging/logger.js';
import { getArchiveLocal, putArchiveLocal } from './local-archive.js';
import { localSandboxesRoot } from './paths.js';
import { spawnTransport } from './spawn-transport.js';

/**
 * `backend: local` runs the shell on the host in a per-sandbox directory. It isolates NOTHING:
 * commands see the whole host filesystem as the user running berth. It exists for development and
 * for machines with no engine, and is used only when the config says `backend: local`.
 * What it does guarantee: the shell's environment is built only from grants (plus PATH, HOME, LANG,
 * TERM), never berth's whole environment.
 */
export class LocalBackend implements Backend {
  readonly name = 'local' as const;
  private readonly root: string;

  constructor(opts: { berthHome: string; log?: Logger }) {
    this.root = localSandboxesRoot(opts.berthHome);
  }

  async check(_settings: ProfileSettings): Promise<void> {
    // Nothing to reach: the host is always there.
  }

  async ensure(spec: SandboxSpec, _knownRef: string | undefined): Promise<Sandbox> {
    const dir = join(this.root, spec.dirName);
    mkdirSync(join(dir, '.berth'), { recursive: true, mode: 0o700 });
    return new LocalSandbox(spec, dir);
  }

  async remove(ref: string, hostDir: string | undefined): Promise<void> {
    for (const dir of [ref, hostDir]) {
      if (dir !== undefined && isUnder(dir, this.root)) rmSync(dir, { recursive: true, force: true });
    }
  }

  async stop(_ref: string): Promise<void> {
    // A directory has nothing to stop; its shells are closed by the broker.
  }

  async listManaged(): Promise<ManagedSandbox[]> {
    // Host dirs carry no labels; the broker reaps local sandboxes from its own records.
    return [];
  }

  async close(): Promise<void> {}
}

function isUnder(path: string, root: string): boolean {
  const p = resolve(path);
  return p.startsWith(resolve(root) + sep);
}

class LocalSandbox implements Sandbox {
  readonly ref: string;
  readonly name: string;
  readonly defaultCwd: string;
  readonly stateDir: string;
  readonly hostDir: string;
  readonly homeDir: string;
  /*
   * Only the sandbox dir: the host's /tmp is shared by every session and process on the machine,
   * so it is no root of this sandbox's files (an attached workspace is added by the caller).
   */
  readonly fileRoots: readonly string[];
  readonly recreated = false;

  constructor(readonly spec: SandboxSpec, dir: string) {
    this.ref = dir;
    this.name = spec.dirName;
    this.defaultCwd = dir;
    this.stateDir = join(dir, '.berth');
    this.hostDir = dir;
    this.homeDir = dir;
    this.fileRoots = [dir];
  }

  putArchive(destDir: string, tar: Buffer | Readable): Promise<void> {
    return putArchiveLocal(destDir, tar, { cwd: this.hostDir, env: this.baseEnv() });
  }

  getArchive(path: string): Promise<Readable> {
    return getArchiveLocal(path, { cwd: this.hostDir, env: this.baseEnv() });
  }

  /** Every path of a local sandbox is a host path: the file is its own host path. */
  hostPathOf(sandboxPath: string): { hostPath: string; hostRoot: string } {
    return { hostPath: sandboxPath, hostRoot: sandboxPath };
  }

  private baseEnv(): Record<string, string> {
    return {
      PATH: process.env['PATH'] ?? '/usr/local/bin:/usr/bin:/bin',
      HOME: this.hostDir,
      LANG: 'C.UTF-8',
      TERM: 'dumb',
      SHELL: '/bin/bash',
    };
  }

  async openShell(opts: { env: Readonly<Record<string, string>>; cwd: string }): Promise<ShellTransport> {
    return spawnTransport('bash', ['--noprofile', '--norc'], { cwd: opts.cwd, env: { ...this.baseEnv(), ...opts.env } });
  }

  /**
   * Output past the bound (stdout + stderr, see `ExecOnceOptions.maxOutputBytes`) is not kept:
   * the pipes are destroyed at once (nothing more is read), the child gets SIGKILL and the call
   * rejects with `helper_output_too_large`.
   */
  execOnce(argv: string[], opts?: ExecOnceOptions): Promise<ExecOnceResult> {
    const [file, ...args] = argv;
    if (file === undefined) return Promise.reject(new Error('execOnce needs a program'));
    const cap = helperOutputCap(opts);
    return new Promise((resolvePromise, reject) => {
      const child = spawn(file, args, { cwd: this.defaultCwd, env: this.baseEnv(), stdio: ['ignore', 'pipe', 'pipe'] });
      const timer = setTimeout(() => child.kill('SIGKILL'), opts?.timeoutMs ?? 10_000);
      const out: Buffer[] = [];
      const err: Buffer[] = [];
      let collected = 0;
      let overflow = false;
      const collect = (into: Buffer[]) => (b: Buffer): void => {
        if (overflow) return;
        collected += b.length;
        if (collected <= cap) {
          into.push(b);
          return;
        }
        overflow = true;
        out.length = 0;
        err.length = 0;
        clearTimeout(timer);
        child.stdout.destroy();
        child.stderr.destroy();
        child.kill('SIGKILL');
        reject(helperOutputTooLarge(argv, `sandbox ${this.name}`, cap));
      };
      child.stdout.on('data', collect(out));
      child.stderr.on('data', collect(err));
      child.on('error', (e) => { clearTimeout(timer); reject(e); });
      child.on('close', (code, signal) => {
        clearTimeout(timer);
        if (overflow) return;
        resolvePromise({ exitCode: code ?? (signal ? 128 + 9 : 1), stdout: Buffer.concat(out), stderr: Buffer.concat(err) });
      });
    });
  }
}
