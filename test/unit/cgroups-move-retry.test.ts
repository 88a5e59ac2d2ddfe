import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, expect, it, vi } from 'vitest';
import { CgroupDir } from '../../src/backends/cgroups/cgroup-dir.js';
import { SandboxCgroups } from '../../src/backends/cgroups/sandbox-cgroups.js';
import { Logger } from '../../src/logging/logger.js';

/*
 * Moving a shell into a new command group while another berth process of the same sandbox sweeps
 * away the groups it finds empty: a group swept between its mkdir and the move is made again (up
 * to three attempts), and nothing else is retried. The kernel's files laid out in a plain dir (a
 * move is a write to the group's `cgroup.procs`): the logic, not the kernel's.
 */

const roots: string[] = [];
afterEach(() => {
  vi.restoreAllMocks();
  for (const r of roots.splice(0)) rmSync(r, { recursive: true, force: true });
});

function sandbox(opts: { ownBase?: boolean } = {}): { cgroups: SandboxCgroups; base: string; groups: () => string[] } {
  const root = mkdtempSync(join(tmpdir(), 'berth-cg-move-'));
  roots.push(root);
  const base = join(root, 'sandbox');
  mkdirSync(base);
  const cgroups = new SandboxCgroups({ host: { unified: root, v1: new Map() }, base: '/sandbox', pidLevel: 1, log: Logger.silent(), ...opts });
  return { cgroups, base, groups: () => readdirSync(base).filter((n) => n.startsWith('berth-')) };
}

/** `CgroupDir.make` as another process's sweep races it: the first `sweeps` groups made are gone before the move. */
function sweptAfterMake(sweeps: number): { made: () => number } {
  const make = CgroupDir.make.bind(CgroupDir);
  let made = 0;
  vi.spyOn(CgroupDir, 'make').mockImplementation((parent, name) => {
    const dir = make(parent, name);
    if (made++ < sweeps) rmSync(dir.path, { recursive: true });
    return dir;
  });
  return { made: () => made };
}

it('a group swept away between its mkdir and the move is made again, and the process lands in the new one', () => {
  const { cgroups, groups } = sandbox();
  const spy = sweptAfterMake(2);
  const group = cgroups.moveToNew(4242);
  expect(spy.made()).toBe(3);
  expect(readFileSync(join(group.path, 'cgroup.procs'), 'latin1')).toBe('4242\n');
  expect(groups()).toEqual([group.path.split('/').at(-1)]);
});

it('after three sweeps in a row it gives up with the ENOENT, and leaves no group behind', () => {
  const { cgroups, groups } = sandbox();
  const spy = sweptAfterMake(3);
  expect(() => cgroups.moveToNew(4242)).toThrow(expect.objectContaining({ code: 'ENOENT' }));
  expect(spy.made()).toBe(3);
  expect(groups()).toEqual([]);
});

it('any other failure of the move is not retried, and its group goes', () => {
  const { cgroups, groups } = sandbox();
  const make = CgroupDir.make.bind(CgroupDir);
  let made = 0;
  vi.spyOn(CgroupDir, 'make').mockImplementation((parent, name) => {
    made++;
    const dir = make(parent, name);
    // A process list that cannot be written (here: a dir in its place, EISDIR), as a process that is gone would refuse.
    mkdirSync(join(dir.path, 'cgroup.procs'));
    return dir;
  });
  expect(() => cgroups.moveToNew(4242)).toThrow(expect.objectContaining({ code: 'EISDIR' }));
  expect(made).toBe(1);
  // Its group holds a dir the test made, so it stays; berth's remove did not fail the call.
  expect(groups()).toHaveLength(1);
});

it('where berth made the sandbox\'s own cgroup (bwrap, local), one another process reaped empty is made again first', () => {
  const { cgroups, base, groups } = sandbox({ ownBase: true });
  rmSync(base, { recursive: true });
  const group = cgroups.moveToNew(4242);
  expect(existsSync(base)).toBe(true);
  expect(readFileSync(join(group.path, 'cgroup.procs'), 'latin1')).toBe('4242\n');
  expect(groups()).toHaveLength(1);
});

it('where the engine made it (docker), a sandbox cgroup that is gone is not made again: the move fails', () => {
  const { cgroups, base } = sandbox();
  rmSync(base, { recursive: true });
  expect(() => cgroups.moveToNew(4242)).toThrow(expect.objectContaining({ code: 'ENOENT' }));
  expect(existsSync(base)).toBe(false);
});
