import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, expect, it } from 'vitest';
import { SandboxCgroups } from '../../src/backends/cgroups/sandbox-cgroups.js';
import { Logger } from '../../src/logging/logger.js';

/*
 * Whether a command left a process running in a sandbox, read from its command groups: what keeps
 * a sandbox from hibernating (or being removed as idle) though no shell's job table lists it
 * (`(cmd &)`, `setsid`, a daemon). A live shell sits in the group of its last command and is left
 * out by its host pid. The kernel's files laid out in a plain dir: the logic, not the kernel's.
 */

/**
 * Pids no process has (past the kernel's pid_max): their parent cannot be read, so they count as a
 * command's (the careful answer), as a process in the sandbox would.
 */
const GONE = 4_194_304;

const roots: string[] = [];
afterEach(() => {
  for (const r of roots.splice(0)) rmSync(r, { recursive: true, force: true });
});

/** A sandbox's cgroup at `<root>/sandbox`; `group(rel, pids)` lays out one of its groups. */
function sandbox(): { cgroups: SandboxCgroups; group: (rel: string, pids: number[]) => void } {
  const root = mkdtempSync(join(tmpdir(), 'berth-cg-running-'));
  roots.push(root);
  const group = (rel: string, pids: number[]): void => {
    const dir = join(root, 'sandbox', rel);
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, 'cgroup.procs'), pids.map((p) => `${p}\n`).join(''));
    writeFileSync(join(dir, 'cgroup.events'), `populated ${pids.length > 0 ? 1 : 0}\nfrozen 0\n`);
  };
  group('.', [1]);
  const cgroups = new SandboxCgroups({ host: { unified: root, v1: new Map() }, base: '/sandbox', pidLevel: 1, log: Logger.silent() });
  return { cgroups, group };
}

it('a group that holds only a live shell is not a command running; one more process in it is', () => {
  const { cgroups, group } = sandbox();
  expect(cgroups.commandsRunning(new Set([10]))).toBe(false);
  group('berth-a', [10]);
  expect(cgroups.commandsRunning(new Set([10]))).toBe(false);
  // Asked without the live shells (no process holds the sandbox): the shell counts.
  expect(cgroups.commandsRunning()).toBe(true);
  group('berth-a', [10, GONE + 20]);
  expect(cgroups.commandsRunning(new Set([10]))).toBe(true);
});

it("a process in a group no live shell is in (an ended shell's, another berth process's) is running; empty groups are not", () => {
  const { cgroups, group } = sandbox();
  group('berth-a', [10]);
  group('berth-old', []);
  expect(cgroups.commandsRunning(new Set([10]))).toBe(false);
  group('berth-old', [GONE + 30]);
  expect(cgroups.commandsRunning(new Set([10]))).toBe(true);
});

it('a populated group below a shell\'s group counts, though the shell is its only process', () => {
  const { cgroups, group } = sandbox();
  group('berth-a', [10]);
  group('berth-a/inner', [GONE + 40]);
  expect(cgroups.commandsRunning(new Set([10]))).toBe(true);
});

it('processes in the sandbox\'s own cgroup (the warden, helpers) or in a group not named by berth are not commands', () => {
  const { cgroups, group } = sandbox();
  group('.', [1, 2, 3]);
  group('other', [50]);
  expect(cgroups.commandsRunning(new Set())).toBe(false);
});

it("a process whose parent is outside the sandbox (a shell berth started, another berth process's) is not a command's", async () => {
  const { cgroups, group } = sandbox();
  // A real process whose parent is this test's: outside the sandbox's cgroup, as a shell's parent
  // is the engine's shim (docker) or berth itself (local). A command's processes are parented inside.
  const child = spawn('sleep', ['30'], { stdio: 'ignore' });
  try {
    await new Promise((r) => child.once('spawn', r));
    group('berth-other', [child.pid!]);
    expect(cgroups.commandsRunning(new Set([10]))).toBe(false);
    group('berth-other', [child.pid!, GONE + 50]);
    expect(cgroups.commandsRunning(new Set([10]))).toBe(true);
  } finally {
    child.kill('SIGKILL');
  }
});
