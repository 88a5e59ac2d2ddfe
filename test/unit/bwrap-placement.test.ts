import { chmodSync, mkdirSync, mkdtempSync, readFileSync, realpathSync, rmSync, statSync, symlinkSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import { placeSandbox, removeSandbox } from '../../src/backends/bwrap/placement.js';
import { prepareRoot, rootLayout, sandboxDirs } from '../../src/backends/bwrap/sandbox-dirs.js';
import { sandboxUser } from '../../src/backends/bwrap/sandbox-user.js';
import { checkUidRange, claimOwner, claimUid, releaseStaleClaims, releaseUid } from '../../src/backends/bwrap/uid-claims.js';

const IS_ROOT = process.getuid?.() === 0;

function temp(): string {
  const d = realpathSync(mkdtempSync(join(tmpdir(), 'berth-bwrap-unit-')));
  chmodSync(d, 0o711);
  onTestFinished(() => rmSync(d, { recursive: true, force: true }));
  return d;
}

describe('sandboxUser', () => {
  it('never picks root: a root-owned attached workspace is refused', () => {
    expect(() => sandboxUser({ berthUid: 0, attached: { path: '/srv/p', uid: 0, gid: 0 } })).toThrow(/belongs to root.*never runs as root/);
  });

  it('runs as the owner of an attached workspace, as its own uid otherwise, and as berth when berth is not root', () => {
    expect(sandboxUser({ berthUid: 0, attached: { path: '/home/ana/p', uid: 1000, gid: 1000 } })).toEqual({ kind: 'workspace-owner', uid: 1000, gid: 1000 });
    expect(sandboxUser({ berthUid: 0 })).toEqual({ kind: 'own-uid' });
    expect(sandboxUser({ berthUid: 1000 })).toEqual({ kind: 'berth' });
    expect(() => sandboxUser({ berthUid: 1000, attached: { path: '/home/bo/p', uid: 1001, gid: 1001 } })).toThrow(/only as itself/);
  });
});

describe('uid claims', () => {
  it('hands out each uid once, across claimers, and says when the range is full', () => {
    const dir = temp();
    const range = { first: 500_000, count: 3 };
    const uids = ['/r/a', '/r/b', '/r/c'].map((o) => claimUid(dir, range, o));
    expect(new Set(uids).size).toBe(3);
    expect(uids.every((u) => u >= 500_000 && u < 500_003)).toBe(true);
    expect(() => claimUid(dir, range, '/r/d')).toThrow(/every uid of the bwrap uid range 500000\.\.500002 is taken/);
    releaseUid(dir, uids[1]!, '/r/b');
    expect(claimUid(dir, range, '/r/d')).toBe(uids[1]);
  });

  it('releases only its own claim', () => {
    const dir = temp();
    const uid = claimUid(dir, { first: 600_000, count: 10 }, '/r/a');
    releaseUid(dir, uid, '/r/someone-else');
    expect(claimOwner(dir, uid)).toBe('/r/a');
    releaseUid(dir, uid, '/r/a');
    expect(claimOwner(dir, uid)).toBeUndefined();
  });

  it('frees stale claims (sandbox dir gone, older than a minute) under its own sandboxes dir only', () => {
    const dir = temp();
    const claims = join(dir, 'claims');
    mkdirSync(claims);
    const range = { first: 700_000, count: 10 };
    const live = join(dir, 'sandboxes', 'live');
    mkdirSync(live, { recursive: true });
    const a = claimUid(claims, range, live);
    const b = claimUid(claims, range, join(dir, 'sandboxes', 'gone'));
    const c = claimUid(claims, range, '/elsewhere/gone');
    const d = claimUid(claims, range, join(dir, 'sandboxes', 'gone-but-fresh'));
    const old = new Date(Date.now() - 120_000);
    for (const u of [a, b, c]) utimesSync(join(claims, String(u)), old, old);
    expect(releaseStaleClaims(claims, join(dir, 'sandboxes'))).toEqual([b]);
    expect([a, c, d].map((u) => claimOwner(claims, u) !== undefined)).toEqual([true, true, true]);
  });

  it('refuses ranges that include system accounts, nobody, or uids read as negative', () => {
    expect(checkUidRange({ first: 100_000, count: 65_536 })).toBeUndefined();
    expect(checkUidRange({ first: 500, count: 10 })).toMatch(/system accounts/);
    expect(checkUidRange({ first: 60_000, count: 10_000 })).toMatch(/65534/);
    expect(checkUidRange({ first: 2 ** 31 - 5, count: 10 })).toMatch(/negative/);
  });
});

describe('sandbox dirs', () => {
  it('refuses a root whose ancestor others can write, or that others cannot traverse', () => {
    const d = temp();
    const open = join(d, 'open');
    mkdirSync(open);
    chmodSync(open, 0o777);
    expect(() => prepareRoot(join(open, 'root'))).toThrow(/open is writable by others/);
    const closed = join(d, 'closed');
    mkdirSync(closed, { mode: 0o700 });
    expect(() => prepareRoot(join(closed, 'root'))).toThrow(/closed is not traversable by others/);
    const link = join(d, 'link');
    symlinkSync(d, link);
    expect(() => prepareRoot(join(link, 'root'))).toThrow(/link is a symlink/);
  });

  it('names dirs from plain names only', () => {
    expect(sandboxDirs('/r', 'session-a1').workspace).toBe('/r/sandboxes/session-a1/workspace');
    for (const bad of ['..', '.', 'a/b', '', 'x'.repeat(121)]) expect(() => sandboxDirs('/r', bad), bad).toThrow(/not a plain name/);
  });

  it.skipIf(!IS_ROOT)('gives a new sandbox its own uid, keeps it across placements, and frees it on removal (needs root)', () => {
    const root = join(temp(), 'root');
    prepareRoot(root);
    const range = { first: 800_000, count: 100 };
    const a = placeSandbox({ root, name: 'a', range });
    const b = placeSandbox({ root, name: 'b', range });
    expect(a.user!.uid).not.toBe(b.user!.uid);
    expect(statSync(a.dirs.workspace).uid).toBe(a.user!.uid);
    expect((statSync(a.dirs.workspace).mode & 0o777).toString(8)).toBe('700');
    expect((statSync(a.dirs.root).mode & 0o777).toString(8)).toBe('711');
    expect(placeSandbox({ root, name: 'a', range }).user).toEqual(a.user);
    writeFileSync(join(a.dirs.workspace, 'f'), 'x');
    removeSandbox(root, a.dirs);
    expect(() => statSync(a.dirs.root)).toThrow();
    expect(claimOwner(rootLayout(root).uids, a.user!.uid)).toBeUndefined();
    expect(readFileSync(join(rootLayout(root).uids, String(b.user!.uid)), 'utf8')).toBe(b.dirs.root);
  });

  it.skipIf(!IS_ROOT)('refuses a sandbox whose dirs belong to another uid than its claim, instead of repairing it (needs root)', () => {
    const root = join(temp(), 'root');
    prepareRoot(root);
    const range = { first: 900_000, count: 100 };
    const a = placeSandbox({ root, name: 'a', range });
    expect(() => placeSandbox({ root, name: 'a', range: { first: 950_000, count: 10 } })).toThrow(/outside the configured bwrap uid range/);
    releaseUid(rootLayout(root).uids, a.user!.uid, a.dirs.root);
    claimUid(rootLayout(root).uids, { first: a.user!.uid, count: 1 }, '/other/sandbox');
    expect(() => placeSandbox({ root, name: 'a', range })).toThrow(/claimed by \/other\/sandbox/);
  });
});
