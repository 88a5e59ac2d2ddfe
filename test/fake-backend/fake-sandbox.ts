import type { SandboxHandle, SandboxSpec, SpawnOptions } from '../../src/backends/backend.js';
import type { SpawnedProcess } from '../../src/shell/transport.js';
import { spawnOnHost } from '../../src/backends/local/spawn.js';
import { SandboxNotFoundError } from '../../src/errors.js';
import { FAKE_SANDBOX_ENV, type FakeContainer, type FakeEngine } from './fake-engine.js';

/** A fake sandbox: real host processes in its dir, each tagged with the sandbox's ref. */
export class FakeSandboxHandle implements SandboxHandle {
  readonly ref: string;
  readonly name: string;
  readonly defaultCwd: string;
  readonly stateDir: string;
  readonly hostDir: string;
  readonly homeDir: string;
  readonly fileRoots: readonly string[];

  constructor(readonly spec: SandboxSpec, c: FakeContainer, private readonly engine: FakeEngine, readonly recreated: boolean) {
    this.ref = c.ref;
    this.name = c.name;
    this.defaultCwd = c.dir;
    this.stateDir = `${c.dir}/.berth`;
    this.hostDir = c.dir;
    this.homeDir = c.dir;
    this.fileRoots = [c.dir];
  }

  /** As an engine does: a sandbox that is gone (or stopped) starts nothing, and says it is gone. */
  async spawn(argv: readonly string[], opts: SpawnOptions): Promise<SpawnedProcess> {
    const c = this.engine.byRef(this.ref);
    if (c === undefined || !c.running) throw new SandboxNotFoundError(`fake sandbox ${this.name} is ${c === undefined ? 'gone' : 'stopped'}`);
    const env = {
      PATH: process.env['PATH'] ?? '/usr/bin:/bin', HOME: c.dir, LANG: 'C.UTF-8', TERM: 'dumb',
      ...opts.env,
      // Last, so nothing a caller passes can untag a process from its sandbox.
      [FAKE_SANDBOX_ENV]: this.ref,
    };
    return spawnOnHost(argv, { cwd: opts.cwd ?? c.dir, env, stdin: opts.stdin, where: `fake sandbox ${this.name}` });
  }

  hostPathOf(sandboxPath: string): { hostPath: string; hostRoot: string } {
    return { hostPath: sandboxPath, hostRoot: sandboxPath };
  }
}
