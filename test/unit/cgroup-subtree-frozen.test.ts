import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, expect, it } from 'vitest';
import { CgroupDir } from '../../src/backends/cgroups/cgroup-dir.js';

/*
 * A group's `frozen 1` speaks for its own processes only (a process of a child group may still be
 * inside a system call), so a freeze that copies a sandbox's files waits for every group below
 * too. The kernel's files laid out in a plain dir: the logic of the wait, not the kernel's.
 */

const roots: string[] = [];
afterEach(() => {
  for (const r of roots.splice(0)) rmSync(r, { recursive: true, force: true });
});

function tree(): { root: string; events: (rel: string, frozen: 0 | 1) => void } {
  const root = mkdtempSync(join(tmpdir(), 'berth-cg-'));
  roots.push(root);
  const events = (rel: string, frozen: 0 | 1): void => {
    mkdirSync(join(root, rel), { recursive: true });
    writeFileSync(join(root, rel, 'cgroup.events'), `populated 1\nfrozen ${frozen}\n`);
  };
  return { root, events };
}

it('waits for every group below, at any depth, not only its own frozen flag', async () => {
  const { root, events } = tree();
  events('.', 1);
  events('berth-a', 1);
  events('berth-a/inner', 0);
  const group = new CgroupDir(root);
  expect(await group.frozen(20)).toBe(true);
  expect(await group.subtreeFrozen(50)).toBe(false);
  const waiting = group.subtreeFrozen(2_000);
  setTimeout(() => events('berth-a/inner', 1), 30);
  expect(await waiting).toBe(true);
});

it('a group made while it waited is waited for too', async () => {
  const { root, events } = tree();
  events('.', 1);
  events('berth-a', 0);
  const group = new CgroupDir(root);
  const waiting = group.subtreeFrozen(2_000);
  // While it waits for berth-a, berth-b appears unfrozen; berth-a then freezes.
  setTimeout(() => {
    events('berth-b', 0);
    events('berth-a', 1);
  }, 20);
  let settled = false;
  void waiting.then(() => (settled = true));
  await new Promise((r) => setTimeout(r, 150));
  expect(settled).toBe(false);
  events('berth-b', 1);
  expect(await waiting).toBe(true);
});
