import { expect, it } from 'vitest';
import { isBerthError } from '../../src/errors.js';
import { bwrapInstall, describeBwrap, testRange, type BwrapInstall } from '../helpers/bwrap.js';

/*
 * Snapshots, restore and fork through the broker on bwrap (the library's surface): files and the
 * shell's cwd and exported variable come back, forks never see each other, and a restore of a
 * snapshot whose copy was removed behind berth's back changes nothing and says so.
 */

const range = testRange();
const install = (): BwrapInstall => bwrapInstall('berth-bwrap-snap-', range);

const STATE = 'mkdir -p /workspace/w/sub && cd /workspace/w/sub && export STAGE=one && echo one > /workspace/file';
const READ = 'printf "%s|%s|%s" "$PWD" "${STAGE-unset}" "$(cat /workspace/file)"';

describeBwrap('snapshots, restore and fork (bwrap)', () => {
  it('restore and fork keep files, cwd and exported variables; forks are independent', async () => {
    const b = await install().open();
    const s1 = b.session({ session: 's1' });
    expect((await s1.exec(STATE)).exitCode).toBe(0);
    await s1.snapshots.create({ name: 'one' });
    await s1.exec('cd / && export STAGE=two && echo two > /workspace/file');
    await s1.snapshots.restore('one');
    expect((await s1.exec(READ)).stdout).toBe('/workspace/w/sub|one|one');

    await s1.fork({ toSession: 'f1' });
    await s1.fork({ toSession: 'f2', from: 'one' });
    expect((await b.exec({ session: 'f1' }, READ)).stdout).toBe('/workspace/w/sub|one|one');
    await b.exec({ session: 'f1' }, 'echo f1 > /workspace/file');
    await s1.exec('echo s1 > /workspace/file');
    expect((await b.exec({ session: 'f2' }, READ)).stdout).toBe('/workspace/w/sub|one|one');
    expect((await b.exec({ session: 'f1' }, 'cat /workspace/file')).stdout).toBe('f1\n');
    expect((await s1.exec('cat /workspace/file')).stdout).toBe('s1\n');
    for (const s of ['s1', 'f1', 'f2']) await b.closeSession({ session: s });
  }, 120_000);

  it('a restore whose snapshot copy is gone fails, says so, and the sandbox keeps its state', async () => {
    const t = install();
    const b = await t.open();
    const s1 = b.session({ session: 's1' });
    await s1.exec('cd /tmp && export KEEP=yes && echo before > /workspace/file');
    await s1.snapshots.create({ name: 'x' });
    await s1.exec('echo after > /workspace/file');
    const { rmSync, readdirSync } = await import('node:fs');
    const { join } = await import('node:path');
    const dir = join(t.home, 'snapshots', 'bwrap');
    for (const d of readdirSync(dir)) rmSync(join(dir, d), { recursive: true, force: true });
    const err = await s1.snapshots.restore('x').then(() => undefined, (e: unknown) => e);
    expect(isBerthError(err) ? err.message : String(err)).toMatch(/snapshot "x" cannot be restored: .*; sandbox "session:s1" and snapshot "x" are as they were/);
    expect((await s1.exec('printf "%s %s " "$PWD" "$KEEP"; cat /workspace/file')).stdout).toBe('/tmp yes after\n');
    await b.closeSession({ session: 's1' });
  }, 120_000);

  it('a granted secret\'s value in an extended attribute (setfattr in the sandbox) refuses the snapshot, naming the file, never the value', async () => {
    const secret = 'tok-8f1a2b3c4d5e6f70';
    const b = await install().open({ env: { forward: ['API_TOKEN'] } }, { env: { API_TOKEN: secret } });
    const s1 = b.session({ session: 's1' });
    const set = await s1.exec('echo plain > /workspace/tagged && setfattr -n user.note -v "$API_TOKEN" /workspace/tagged && getfattr -d /workspace/tagged | wc -l');
    expect(set.exitCode, set.output).toBe(0);
    const err = await s1.snapshots.create({ name: 'leak' }).then(() => undefined, (e: unknown) => e);
    expect(isBerthError(err) && err.code).toBe('policy_refused');
    expect((err as Error).message).toMatch(/\/workspace\/tagged holds the value of granted variable API_TOKEN/);
    expect((err as Error).message).not.toContain(secret);
    expect(await s1.snapshots.list()).toEqual([]);
    // The attribute gone, the same sandbox snapshots.
    expect((await s1.exec('setfattr -x user.note /workspace/tagged')).exitCode).toBe(0);
    await s1.snapshots.create({ name: 'clean' });
    await b.closeSession({ session: 's1' });
  }, 120_000);
});
