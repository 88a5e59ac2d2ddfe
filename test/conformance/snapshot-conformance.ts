import { randomBytes } from 'node:crypto';
import { execFileSync } from 'node:child_process';
import { readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { expect } from 'vitest';
import type { Backend, Sandbox, SandboxSpec, SnapshotCapability } from '../../src/backends/backend.js';
import { BerthError } from '../../src/errors.js';

/*
 * The snapshot capability (`Backend.snapshots`) at the backend's own seam: what a snapshot holds,
 * that it and the sandboxes made from it are independent, that a restore from a damaged one
 * changes nothing, that a forbidden value is refused, and that nothing is left behind.
 */

/** The snapshot tests of the conformance suite by name. */
export const SNAPSHOT_TESTS = {
  snapFiles: 'snapshots: files in home and workspace (a few MiB) survive snapshot and create-from, ephemeral and persistent',
  snapIndependent: 'snapshots: a snapshot does not see later changes, and two sandboxes made from one do not see each other\'s',
  snapRestore: 'snapshots: a restore replaces the sandbox\'s files; from a damaged snapshot it fails naming what is gone and the old sandbox still answers',
  snapForbidden: 'snapshots: a forbidden value in a file refuses the snapshot, naming the variable and the path but never the value, and leaves nothing',
  snapList: 'snapshots: list names this installation\'s only; remove is idempotent and leaves nothing',
  snapBudget: 'snapshots: a sparse file past the budget refuses the snapshot before it is copied, naming the dir and the limit, and leaves nothing',
} as const;

/** A budget no test snapshot comes near. */
export const UNBOUNDED = { maxBytes: Number.MAX_SAFE_INTEGER, limit: 'no limit (test)' };

/** What the suite gives the snapshot tests. */
export interface SnapshotContext {
  newHome(): string;
  backendOn(home: string): Promise<Backend>;
  specOn(home: string, key: string, ephemeral: boolean): SandboxSpec;
  sh(sandbox: Sandbox, script: string): Promise<string>;
  /** Damages a snapshot behind berth's back (its image or its copied files gone); what `verify` must then name. */
  damageSnapshot?(ref: string): Promise<string>;
  /** Removes one file of a snapshot's copied files behind berth's back (the copy still there); what `verify` must then name. */
  damageSnapshotPartly?(ref: string): Promise<string>;
  /** This installation's snapshot objects the engine still holds, tagged or not (images); [] where there is no engine. */
  leftoverSnapshots?(home: string): Promise<string[]>;
}

/** Deletes one regular file under `dir` (a snapshot's copy of a sandbox dir) behind berth's back; returns what verify must name. */
export function removeOneFile(dir: string): string {
  const file = execFileSync('find', [dir, '-type', 'f', '-print', '-quit'], { encoding: 'utf8' }).trim();
  if (file === '') throw new Error(`no file under ${dir} to remove`);
  rmSync(file);
  return `(${dir}) holds`;
}

type Test = (name: string, fn: () => Promise<void>, timeoutMs?: number) => void;

export function snapshotConformance(test: Test, c: () => SnapshotContext): void {
  const snaps = (b: Backend): SnapshotCapability => {
    if (b.snapshots === undefined) throw new Error(`the ${b.name} backend has no snapshot capability; list these tests in its written skips`);
    return b.snapshots;
  };
  const id = (): string => `conf-${randomBytes(4).toString('hex')}`;
  /** A few MiB of random bytes in the workspace and a file in the home; their checksums. */
  const plant = async (s: Sandbox): Promise<string> => portable(s, await c().sh(s,
    `head -c 3145728 /dev/urandom > ${s.defaultCwd}/big.bin && mkdir -p ${s.homeDir}/d && echo home-file > ${s.homeDir}/d/h.txt && ` +
    `ln -s big.bin ${s.defaultCwd}/link && sha256sum ${s.defaultCwd}/big.bin ${s.homeDir}/d/h.txt && readlink ${s.defaultCwd}/link`));
  /**
   * The sandbox again after a snapshot of it: a backend that cannot freeze a sandbox while it
   * copies ends its processes (bwrap), and the caller brings it up again, as the broker does.
   */
  const again = (b: Backend, s: Sandbox): Promise<Sandbox> => b.ensure(s.spec, s.ref);
  const sums = async (s: Sandbox): Promise<string> => portable(s, await c().sh(s, `sha256sum ${s.defaultCwd}/big.bin ${s.homeDir}/d/h.txt && readlink ${s.defaultCwd}/link`));
  /** Output with the sandbox's own dirs named alike: a sandbox made from a snapshot may have dirs of its own (ssh: another account's home). */
  const portable = (s: Sandbox, out: string): string => out.replaceAll(s.defaultCwd, '<cwd>').replaceAll(s.homeDir, '<home>');
  /** Nothing of the installation's snapshots left: none listed, no files, no engine objects. */
  const assertNoneLeft = async (home: string, b: Backend): Promise<void> => {
    expect(await snaps(b).list()).toEqual([]);
    let files: string[] = [];
    try {
      files = readdirSync(join(home, 'snapshots', b.name));
    } catch {
      files = [];
    }
    expect(files).toEqual([]);
    expect(await c().leftoverSnapshots?.(home) ?? []).toEqual([]);
  };

  test(SNAPSHOT_TESTS.snapFiles, async () => {
    const home = c().newHome();
    const b = await c().backendOn(home);
    for (const ephemeral of [true, false]) {
      let src = await b.ensure(c().specOn(home, ephemeral ? 'session:snap-src' : 'snap-src', ephemeral), undefined);
      const before = await plant(src);
      const snap = await snaps(b).create(src, id(), [], UNBOUNDED);
      src = await again(b, src);
      expect(snap.bytes).toBeGreaterThan(3 * 1024 * 1024);
      await snaps(b).verify(snap.ref);
      const fork = await snaps(b).createFrom(c().specOn(home, ephemeral ? 'session:snap-fork' : 'snap-fork', ephemeral), snap.ref, undefined);
      expect(fork.ref).not.toBe(src.ref);
      expect(await sums(fork)).toBe(before);
      // The source, brought up again where the snapshot ended its processes (bwrap), is untouched.
      expect(await sums(src)).toBe(before);
      for (const s of [src, fork]) await b.remove(s.ref, s.hostDir);
      await snaps(b).remove(snap.ref);
    }
    await assertNoneLeft(home, b);
  }, 180_000);

  test(SNAPSHOT_TESTS.snapIndependent, async () => {
    const home = c().newHome();
    const b = await c().backendOn(home);
    let src = await b.ensure(c().specOn(home, 'session:ind-src', true), undefined);
    await c().sh(src, `echo v1 > ${src.defaultCwd}/f.txt`);
    const snap = await snaps(b).create(src, id(), [], UNBOUNDED);
    src = await again(b, src);
    await c().sh(src, `echo v2 > ${src.defaultCwd}/f.txt && touch ${src.defaultCwd}/later.txt`);
    const [a, z] = [
      await snaps(b).createFrom(c().specOn(home, 'session:ind-a', true), snap.ref, undefined),
      await snaps(b).createFrom(c().specOn(home, 'session:ind-b', true), snap.ref, undefined),
    ];
    const look = (s: Sandbox): Promise<string> => c().sh(s, `cat ${s.defaultCwd}/f.txt; ls ${s.defaultCwd}`);
    expect(await look(a)).toBe('v1\nf.txt\n');
    await c().sh(a, `echo from-a > ${a.defaultCwd}/f.txt && touch ${a.defaultCwd}/only-a`);
    expect(await look(z)).toBe('v1\nf.txt\n');
    expect(await look(src)).toBe('v2\nf.txt\nlater.txt\n');
    for (const s of [src, a, z]) await b.remove(s.ref, s.hostDir);
    await snaps(b).remove(snap.ref);
    await assertNoneLeft(home, b);
  }, 180_000);

  test(SNAPSHOT_TESTS.snapRestore, async () => {
    const home = c().newHome();
    const b = await c().backendOn(home);
    for (const ephemeral of [true, false]) {
      const spec = c().specOn(home, ephemeral ? 'session:rs' : 'rs', ephemeral);
      let old = await b.ensure(spec, undefined);
      await c().sh(old, `echo snapped > ${old.defaultCwd}/f.txt`);
      const good = await snaps(b).create(old, id(), [], UNBOUNDED);
      old = await again(b, old);
      const bad = await snaps(b).create(old, id(), [], UNBOUNDED);
      old = await again(b, old);
      const partly = c().damageSnapshotPartly === undefined ? undefined : await snaps(b).create(old, id(), [], UNBOUNDED);
      if (partly !== undefined) old = await again(b, old);
      await c().sh(old, `echo current > ${old.defaultCwd}/f.txt && touch ${old.homeDir}/after`);

      // Damaged behind berth's back: verify names what is gone; the restore fails before touching anything.
      const gone = await c().damageSnapshot!(bad.ref);
      const verr = await snaps(b).verify(bad.ref).catch((e: unknown) => e);
      expect(verr).toBeInstanceOf(BerthError);
      expect((verr as Error).message).toContain(gone);
      const rerr = await snaps(b).createFrom(spec, bad.ref, { ref: old.ref, hostDir: old.hostDir }).catch((e: unknown) => e);
      expect((rerr as Error).message).toContain(gone);
      expect(await c().sh(old, `cat ${old.defaultCwd}/f.txt; test -e ${old.homeDir}/after && echo has-after`)).toBe('current\nhas-after\n');

      // One file of its copy gone, the copy still there: refused as damaged too, never restored partly.
      if (partly !== undefined) {
        const named = await c().damageSnapshotPartly!(partly.ref);
        const perr = await snaps(b).createFrom(spec, partly.ref, { ref: old.ref, hostDir: old.hostDir }).catch((e: unknown) => e);
        expect(perr).toBeInstanceOf(BerthError);
        expect((perr as Error).message).toContain(named);
        expect((perr as Error).message).toContain('removed or changed outside berth');
        expect(await c().sh(old, `cat ${old.defaultCwd}/f.txt; test -e ${old.homeDir}/after && echo has-after`)).toBe('current\nhas-after\n');
        await snaps(b).remove(partly.ref);
      }

      // A whole one replaces it: the snapshot's files, the old sandbox gone.
      const restored = await snaps(b).createFrom(spec, good.ref, { ref: old.ref, hostDir: old.hostDir });
      expect(await c().sh(restored, `cat ${restored.defaultCwd}/f.txt; test -e ${restored.homeDir}/after && echo kept-after || echo no-after`)).toBe('snapped\nno-after\n');
      const listed = (await b.listManaged()).map((m) => m.ref);
      expect(listed).toContain(restored.ref);
      if (restored.ref !== old.ref) expect(listed).not.toContain(old.ref);
      if (!ephemeral) expect(restored.name).toBe(old.name);
      await b.remove(restored.ref, restored.hostDir);
      for (const s of [good, bad]) await snaps(b).remove(s.ref);
    }
    await assertNoneLeft(home, b);
  }, 240_000);

  test(SNAPSHOT_TESTS.snapForbidden, async () => {
    const home = c().newHome();
    const b = await c().backendOn(home);
    let s = await b.ensure(c().specOn(home, 'session:forbid', true), undefined);
    const value = `forbidden-${randomBytes(12).toString('hex')}`;
    // Split across a read boundary (1 MiB) so only a scan that overlaps its chunks finds it.
    await c().sh(s, `mkdir -p ${s.defaultCwd}/deep && head -c 1048570 /dev/zero > ${s.defaultCwd}/deep/x.bin && printf %s ${value} >> ${s.defaultCwd}/deep/x.bin`);
    // A FIFO (a scan that opened it would hang) and a link to a host file holding a forbidden
    // line (a scan that followed it would refuse for HOST_LINE): neither is read.
    await c().sh(s, `mkfifo ${s.defaultCwd}/fifo && ln -s /etc/passwd ${s.defaultCwd}/host-link`);
    const forbidden = [{ name: 'CONF_TOKEN', value }, { name: 'HOST_LINE', value: 'root:x:0:0:' }];
    const sid = id();
    const err = await snaps(b).create(s, sid, forbidden, UNBOUNDED).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(BerthError);
    expect((err as BerthError).code).toBe('policy_refused');
    expect((err as Error).message).toContain('CONF_TOKEN');
    expect((err as Error).message).toContain(`${s.defaultCwd}/deep/x.bin`);
    expect((err as Error).message).not.toContain(value);
    await assertNoneLeft(home, b);
    // Without the value in its files, the same sandbox snapshots.
    s = await again(b, s);
    await c().sh(s, `rm ${s.defaultCwd}/deep/x.bin`);
    const ok = await snaps(b).create(s, sid, forbidden, UNBOUNDED);
    await snaps(b).remove(ok.ref);
    await b.remove(s.ref, s.hostDir);
    await assertNoneLeft(home, b);
  }, 180_000);

  test(SNAPSHOT_TESTS.snapList, async () => {
    const [home, otherHome] = [c().newHome(), c().newHome()];
    const [mine, theirs] = [await c().backendOn(home), await c().backendOn(otherHome)];
    const s = await mine.ensure(c().specOn(home, 'session:list', true), undefined);
    const x = await theirs.ensure(c().specOn(otherHome, 'session:list', true), undefined);
    const [a, z] = [await snaps(mine).create(s, id(), [], UNBOUNDED), await snaps(mine).create(s, id(), [], UNBOUNDED)];
    const other = await snaps(theirs).create(x, id(), [], UNBOUNDED);
    expect((await snaps(mine).list()).sort()).toEqual([a.ref, z.ref].sort());
    expect(await snaps(theirs).list()).toEqual([other.ref]);
    await snaps(mine).remove(a.ref);
    await snaps(mine).remove(a.ref);
    expect(await snaps(mine).list()).toEqual([z.ref]);
    await snaps(mine).remove(z.ref);
    await snaps(theirs).remove(other.ref);
    await mine.remove(s.ref, s.hostDir);
    await theirs.remove(x.ref, x.hostDir);
    await assertNoneLeft(home, mine);
    await assertNoneLeft(otherHome, theirs);
  }, 180_000);

  test(SNAPSHOT_TESTS.snapBudget, async () => {
    const home = c().newHome();
    const b = await c().backendOn(home);
    for (const ephemeral of [true, false]) {
      let s = await b.ensure(c().specOn(home, ephemeral ? 'session:budget' : 'budget', ephemeral), undefined);
      // 256 MiB that take no disk: a copy, an archive or a commit that wrote it out would take them all.
      await c().sh(s, `truncate -s 268435456 ${s.defaultCwd}/sparse`);
      const err = await snaps(b).create(s, id(), [], { maxBytes: 1 << 20, limit: 'the test\'s 1 MiB' }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(BerthError);
      expect((err as BerthError).code).toBe('tenant_limit');
      expect((err as Error).message).toMatch(new RegExp(`refused before copying: ${s.defaultCwd} holds .*bytes .*the test's 1 MiB`));
      await assertNoneLeft(home, b);
      s = await again(b, s);
      expect(await c().sh(s, `ls ${s.defaultCwd}`)).toBe('sparse\n');
      await b.remove(s.ref, s.hostDir);
    }
  }, 180_000);
}
