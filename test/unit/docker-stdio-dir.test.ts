import { mkdirSync, mkdtempSync, readdirSync, rmSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type Dockerode from 'dockerode';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { makeStdioDir, removeStdioDir, STDIO_DIR, STDIO_LABEL, stdioRoot, sweepStdioDirs, usableStdioDir } from '../../src/backends/docker/stdio-dir.js';
import { FifoPool, sweepStaleFifos } from '../../src/backends/plumbing/fifo-pool.js';
import { makeFifos } from '../../src/backends/plumbing/fifo-files.js';

let root: string;
beforeEach(() => {
  root = mkdtempSync(path.join(tmpdir(), 'berth-stdio-unit-'));
});
afterEach(() => rmSync(root, { recursive: true, force: true }));

/** An inspect answer with only what usableStdioDir reads. */
function info(o: { id?: string; rw?: boolean; running?: boolean; pid?: number; dest?: string }): Dockerode.ContainerInspectInfo {
  return {
    Config: { Labels: o.id === undefined ? {} : { [STDIO_LABEL]: o.id } },
    Mounts: [{ Type: 'bind', Source: '/x', Destination: o.dest ?? STDIO_DIR, RW: o.rw ?? false }],
    State: { Running: o.running ?? true, Pid: o.pid ?? process.pid },
  } as unknown as Dockerode.ContainerInspectInfo;
}

describe('a docker container\'s stdio dir', () => {
  it('is made fresh under .stdio, and removed only by a well-formed id', () => {
    const a = makeStdioDir(root);
    const b = makeStdioDir(root);
    expect(a.id).toMatch(/^[0-9a-f]{16}$/);
    expect(a.dir).toBe(path.join(stdioRoot(root), a.id));
    expect(a.id).not.toBe(b.id);
    removeStdioDir(root, '../..');
    removeStdioDir(root, undefined);
    expect(readdirSync(stdioRoot(root)).sort()).toEqual([a.id, b.id].sort());
    removeStdioDir(root, a.id);
    expect(readdirSync(stdioRoot(root))).toEqual([b.id]);
  });

  it('is used only when the container names it, binds it read-only at its place and runs; else why not', () => {
    const { id } = makeStdioDir(root);
    expect(usableStdioDir(root, info({}))).toEqual({ unavailable: expect.stringContaining('no stdio dir') });
    expect(usableStdioDir(root, info({ id: 'not-an-id' }))).toEqual({ unavailable: expect.stringContaining('no stdio dir') });
    expect(usableStdioDir(root, info({ id, rw: true }))).toEqual({ unavailable: expect.stringContaining('read-only') });
    expect(usableStdioDir(root, info({ id, dest: '/elsewhere' }))).toEqual({ unavailable: expect.stringContaining('read-only') });
    expect(usableStdioDir(root, info({ id, running: false }))).toEqual({ unavailable: 'the container is not running' });
  });

  it('is refused when the dir the container sees is not this host\'s (another inode, or not there)', () => {
    const { id, dir } = makeStdioDir(root);
    // This process's root has no STDIO_DIR, or one that is another dir than the one made here.
    const r = usableStdioDir(root, info({ id, pid: process.pid }));
    expect(r).toHaveProperty('unavailable');
    expect(r).not.toEqual({ dir });
  });

  it('a sweep removes old dirs no container names, never a named or a young one, nor a foreign name', () => {
    const named = makeStdioDir(root);
    const orphan = makeStdioDir(root);
    const young = makeStdioDir(root);
    mkdirSync(path.join(stdioRoot(root), 'not-ours'));
    const old = (Date.now() - 3_600_000) / 1000;
    for (const d of [named, orphan]) utimesSync(d.dir, old, old);
    utimesSync(path.join(stdioRoot(root), 'not-ours'), old, old);
    expect(sweepStdioDirs(root, new Set([named.id]), 600_000)).toBe(1);
    expect(readdirSync(stdioRoot(root)).sort()).toEqual([named.id, young.id, 'not-ours'].sort());
    expect(sweepStdioDirs(path.join(root, 'missing'), new Set(), 0)).toBe(0);
  });
});

describe('FIFO sets', () => {
  it('a sweep removes only FIFOs of a pool\'s naming that are old enough', async () => {
    const fifo = (n: string): string => path.join(root, n);
    await makeFifos([fifo('0123456789abcdef.1'), fifo('0123456789abcdef.3'), fifo('other')], '0000', 'in a test');
    writeFileSync(fifo('fedcba9876543210.1'), 'a file, not a FIFO');
    expect(sweepStaleFifos(root, 600_000)).toBe(0);
    expect(sweepStaleFifos(root, 600_000, Date.now() + 3_600_000)).toBe(2);
    expect(readdirSync(root).sort()).toEqual(['fedcba9876543210.1', 'other']);
  });

  it('a pool passes over a set swept meanwhile, and opens up a taken set to its mode', async () => {
    const pool = new FifoPool(root, undefined, 0o666);
    await pool.prime();
    const made = readdirSync(root).length;
    expect(made).toBeGreaterThanOrEqual(8);
    // Another process's sweep took every set this pool made ahead.
    sweepStaleFifos(root, 0, Date.now() + 1);
    const set = await pool.take();
    expect(statSync(set.stdout).mode & 0o777).toBe(0o666);
    expect(statSync(set.stdin).isFIFO()).toBe(true);
    await pool.close();
  });
});
