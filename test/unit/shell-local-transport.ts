import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { SandboxSpec } from '../../src/backends/backend.js';
import type { ExecOnceOptions, ExecOnceResult, ShellTransport } from '../../src/shell/transport.js';
import { LocalSandbox, LocalSandboxHandle } from '../../src/backends/local/sandbox-handle.js';
import type { ShellOptions } from '../../src/shell/types.js';

export { killAll, pidsWithArg } from '../helpers/processes.js';

/*
 * The shell's unit tests run on the production transport: the local backend's own sandbox over a
 * test dir (its spawn in a process group of its own, `bash --noprofile --norc` through the
 * plumbing, the plumbing's execOnce), not a stand-in written for the tests.
 */

const SPEC: SandboxSpec = {
  identity: { installation: 'test', tenant: 'local', profile: 'default', key: 'session:shell-test' },
  digest: 'ef'.repeat(32), dirName: 'shell-test', ephemeral: true, mount: null, rule: 'auto:5', section: undefined,
};

/** The local backend's sandbox over `dir`: on a host backend the host is the sandbox. */
export function localSandboxAt(dir: string): LocalSandbox {
  return new LocalSandbox(new LocalSandboxHandle(SPEC, dir));
}

/** A persistent bash in `cwd` through the local backend's production spawn. */
export function openLocalBash(env: Record<string, string>, cwd: string): Promise<ShellTransport> {
  return localSandboxAt(cwd).openShell({ env, cwd });
}

/** The local backend's production execOnce. */
export function execOnceLocal(argv: string[], opts?: ExecOnceOptions): Promise<ExecOnceResult> {
  return localSandboxAt(tmpdir()).execOnce(argv, opts);
}

export interface Fixture {
  dir: string;
  stateDir: string;
  spillDir: string;
  work: string;
  options(over?: Partial<ShellOptions>, env?: Record<string, string>): ShellOptions;
  cleanup(): void;
}

export function makeFixture(): Fixture {
  const dir = mkdtempSync(join(tmpdir(), 'berth-shell-'));
  const stateDir = join(dir, 'state');
  const spillDir = join(dir, 'spill');
  const work = join(dir, 'work');
  rmSync(work, { recursive: true, force: true });
  return {
    dir,
    stateDir,
    spillDir,
    work,
    options(over = {}, env = {}) {
      const sandbox = localSandboxAt(dir);
      return {
        open: (extra) => sandbox.openShell({ env: { ...env, ...extra }, cwd: dir }),
        execOnce: (argv, o) => sandbox.execOnce(argv, o),
        stateDir,
        shellId: 'test-shell',
        defaultCwd: dir,
        secretNames: [],
        spillDir,
        maxOutputChars: 100_000,
        ...over,
      };
    },
    cleanup() {
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
