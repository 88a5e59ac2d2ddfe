import { expect, it } from 'vitest';
import { BerthError } from '../../src/errors.js';
import { describeDocker, docker, dockerConfig, dockerSuiteHooks, installs } from '../helpers/docker-e2e.js';

/*
 * A docker snapshot removed while a fork's container still uses its image: the engine keeps the
 * image (moved to a "gone" tag), so the snapshot is no longer listed nor found by name, but what it
 * takes still counts against its tenant's limits.snapshotBytes until the sweep frees it, once the
 * fork is gone (design.md §7).
 */

const reg = installs('berth-snapgone-');

describeDocker('a removed docker snapshot a fork still uses', () => {
  dockerSuiteHooks(reg);

  it('keeps counting against its tenant\'s bytes until the sweep frees it, and is neither listed nor found by name meanwhile', async () => {
    const t = reg.track();
    const config = (snapshotBytes?: number) => dockerConfig({ persistent: true, scope: 'session', ...(snapshotBytes === undefined ? {} : { limits: { snapshotBytes } }) });
    const first = await t.open(config());
    // Incompressible bytes, so each snapshot's layer is about this size.
    expect((await first.exec({ session: 's1' }, 'head -c 4000000 /dev/urandom > "$HOME/blob"')).exitCode).toBe(0);
    const one = await first.session({ session: 's1' }).snapshots.create({ name: 'one' });
    expect(one.bytes).toBeGreaterThan(4_000_000);
    await first.session({ session: 's1' }).fork({ toSession: 'f1', from: 'one' });
    await first.close();

    // Room for one such snapshot and a half.
    const b = await t.open(config(Math.floor(one.bytes * 1.5)));
    const s1 = b.session({ session: 's1' });
    expect(await s1.snapshots.remove('one')).toBe(true);
    expect(s1.snapshots.list()).toEqual([]);
    await expect(s1.snapshots.restore('one')).rejects.toMatchObject({ code: 'not_found' });
    // Its image is kept for the fork, under the gone tag, and still counted: a second one does not fit.
    const [image] = (await docker.listImages({ filters: JSON.stringify({ label: [`berth.installation=${t.installation}`, 'berth.snapshot'] }) }))
      .filter((i) => (i.RepoTags ?? []).some((tag) => tag.includes('-gone-')));
    expect(image, 'the removed snapshot\'s image is kept under its gone tag').toBeDefined();
    const over = await s1.snapshots.create({ name: 'two' }).then(() => undefined, (e: unknown) => e);
    expect(over).toBeInstanceOf(BerthError);
    expect((over as BerthError).code).toBe('tenant_limit');
    expect((over as Error).message).toContain('limits.snapshotBytes');
    // The name is free again: refused for the bytes, not as taken.
    const small = await s1.snapshots.create({ name: 'one' }).then(() => undefined, (e: unknown) => e);
    expect((small as BerthError | undefined)?.code).toBe('tenant_limit');

    // A sweep while the fork lives keeps it; once the fork is gone the sweep frees it, and its bytes.
    await b.sweepSnapshots();
    expect((await s1.snapshots.create({ name: 'two' }).then(() => undefined, (e: unknown) => e) as BerthError).code).toBe('tenant_limit');
    expect(await b.removeSandboxOf({ session: 'f1' })).toBe(true);
    await b.sweepSnapshots();
    await expect(docker.getImage(image!.Id).inspect()).rejects.toMatchObject({ statusCode: 404 });
    const two = await s1.snapshots.create({ name: 'two' });
    expect(two.bytes).toBeGreaterThan(4_000_000);
  }, 240_000);
});
