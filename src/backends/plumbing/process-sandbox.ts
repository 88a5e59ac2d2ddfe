import type { Readable } from 'node:stream';
import type { NetnsRef, Sandbox, SandboxHandle, SpawnOptions } from '../backend.js';
import type { ExecOnceOptions, ExecOnceResult, ProcessGroups, ShellTransport, SpawnedProcess } from '../../shell/transport.js';
import type { SandboxSpec } from '../backend.js';
import { execOnce } from './exec-once.js';
import { openShellVia } from './open-shell.js';
import { getArchiveVia, putArchiveVia } from './tar-transfer.js';

/**
 * A sandbox built from a backend's handle and the plumbing written once on its `spawn`: the
 * persistent shell, `execOnce` with its caps and timeout, tar in and out. A backend that does one
 * of these better its own way subclasses it and overrides that one method (as a podman client
 * overrides one call of a docker client); everything else stays shared.
 *
 * @example
 * class EngineArchiveSandbox extends ProcessSandbox {
 *   override getArchive(path: string): Promise<Readable> { return engine.getArchive(this.ref, path); }
 * }
 */
export class ProcessSandbox implements Sandbox {
  constructor(protected readonly handle: SandboxHandle) {}

  get spec(): SandboxSpec { return this.handle.spec; }
  get ref(): string { return this.handle.ref; }
  get name(): string { return this.handle.name; }
  get defaultCwd(): string { return this.handle.defaultCwd; }
  get stateDir(): string { return this.handle.stateDir; }
  get hostDir(): string | undefined { return this.handle.hostDir; }
  get recreated(): boolean { return this.handle.recreated; }
  get homeDir(): string { return this.handle.homeDir; }
  get fileRoots(): readonly string[] { return this.handle.fileRoots; }
  get volatileDirs(): readonly string[] | undefined { return this.handle.volatileDirs; }
  get attachWarden(): (() => Promise<ShellTransport>) | undefined { return this.handle.attachWarden; }
  get processGroups(): ProcessGroups | undefined { return this.handle.processGroups; }

  /** For messages: `sandbox <name>`. */
  protected get where(): string {
    return `sandbox ${this.handle.name}`;
  }

  spawn(argv: readonly string[], opts: SpawnOptions): Promise<SpawnedProcess> {
    return this.handle.spawn(argv, opts);
  }

  processCount(): Promise<{ current: number; limit: number } | undefined> {
    return this.handle.processCount?.() ?? Promise.resolve(undefined);
  }

  get netns(): (() => Promise<NetnsRef>) | undefined {
    return this.handle.netns === undefined ? undefined : () => this.handle.netns!();
  }

  hostPathOf(sandboxPath: string): { hostPath: string; hostRoot: string } | undefined {
    return this.handle.hostPathOf(sandboxPath);
  }

  openShell(opts: { env: Readonly<Record<string, string>>; cwd: string }): Promise<ShellTransport> {
    return openShellVia((argv, o) => this.spawn(argv, o), opts);
  }

  execOnce(argv: string[], opts?: ExecOnceOptions): Promise<ExecOnceResult> {
    return execOnce((a, o) => this.spawn(a, o), argv, opts, this.where);
  }

  putArchive(destDir: string, tar: Buffer | Readable): Promise<void> {
    return putArchiveVia((a, o) => this.spawn(a, o), destDir, tar, this.where);
  }

  getArchive(path: string): Promise<Readable> {
    return getArchiveVia((a, o) => this.spawn(a, o), path, this.where);
  }
}
