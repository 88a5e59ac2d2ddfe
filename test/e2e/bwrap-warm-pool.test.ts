import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { expect, it } from 'vitest';
import { bwrapInstall, describeBwrap, testRange, type BwrapInstall } from '../helpers/bwrap.js';

/*
 * Warm pools on bwrap: a new ephemeral session gets a sandbox started ahead (its own dir and uid),
 * relabelled with its identity at claim; used once; removed with the broker when unclaimed.
 */

const range = testRange();

const install = (): BwrapInstall => bwrapInstall('berth-bwrap-warm-', range);

function metaOf(root: string, name: string): { digest: string; pool?: unknown } {
  return JSON.parse(readFileSync(join(root, 'sandboxes', name, 'meta.json'), 'utf8')) as { digest: string; pool?: unknown };
}

describeBwrap('warm pool (bwrap)', () => {
  it('a new session claims a started sandbox, relabelled with its identity; never given twice; the pool refills; close removes the rest', async () => {
    const t = install();
    const b = await t.open({ warmPool: { size: 2 } }, { warmPool: true });
    await b.warmPoolsSettled();
    const pooled = b.warmPools().flatMap((p) => p.refs);
    expect(pooled).toHaveLength(2);
    for (const ref of pooled) expect(metaOf(t.root, ref.split('/').pop()!).pool).toBeDefined();
    const [x, y] = await Promise.all([b.exec({ session: 'x' }, 'echo hi-x; pwd'), b.exec({ session: 'y' }, 'echo hi-y')]);
    expect(x.stdout).toBe('hi-x\n/workspace\n');
    expect(y.stdout).toBe('hi-y\n');
    const names = b.list('local').map((s) => s.name);
    const claimed = pooled.filter((ref) => names.includes(ref.split('/').pop()!));
    expect(claimed).toHaveLength(2);
    for (const ref of claimed) {
      const meta = metaOf(t.root, ref.split('/').pop()!);
      expect(meta.pool).toBeUndefined();
      expect(meta.digest).toMatch(/^[0-9a-f]{64}$/);
    }
    await b.warmPoolsSettled();
    const refilled = b.warmPools().flatMap((p) => p.refs);
    expect(refilled).toHaveLength(2);
    expect(refilled.some((r) => pooled.includes(r))).toBe(false);
    await b.closeSession({ session: 'x' });
    await b.closeSession({ session: 'y' });
    await b.close();
    expect(readdirSync(join(t.root, 'sandboxes')).filter((n) => !n.startsWith('.'))).toEqual([]);
  }, 60_000);
});
