import { chmodSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, realpathSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect, it, onTestFinished } from 'vitest';
import { BUILTIN_BACKENDS } from '../../src/backends/registry.js';
import { Broker } from '../../src/broker/broker.js';
import { parseConfig } from '../../src/config/schema.js';
import { describeBwrap, testRange } from '../helpers/bwrap.js';

/*
 * Warm pools on bwrap: a new ephemeral session gets a sandbox started ahead (its own dir and uid),
 * relabelled with its identity at claim; used once; removed with the broker when unclaimed.
 */

const range = testRange();

function install(): { home: string; root: string; open(): Promise<Broker> } {
  const dir = realpathSync(mkdtempSync(join(tmpdir(), 'berth-bwrap-warm-')));
  chmodSync(dir, 0o711);
  const home = join(dir, 'home');
  mkdirSync(home, { mode: 0o700 });
  const root = join(dir, 'root');
  const brokers: Broker[] = [];
  onTestFinished(async () => {
    for (const b of brokers) await b.close({ graceMs: 1_000 }).catch(() => undefined);
    rmSync(dir, { recursive: true, force: true });
  });
  return {
    home,
    root,
    open: async () => {
      const config = parseConfig({ backend: 'bwrap', persistent: false, warmPool: { size: 2 }, bwrap: { root, uids: range, tmpSizeMb: 16 } }, undefined, { backends: BUILTIN_BACKENDS });
      const broker = await Broker.open({ config, berthHome: home, env: { PATH: process.env['PATH'] }, warmPool: true });
      brokers.push(broker);
      return broker;
    },
  };
}

function metaOf(root: string, name: string): { digest: string; pool?: unknown } {
  return JSON.parse(readFileSync(join(root, 'sandboxes', name, 'meta.json'), 'utf8')) as { digest: string; pool?: unknown };
}

describeBwrap('warm pool (bwrap)', () => {
  it('a new session claims a started sandbox, relabelled with its identity; never given twice; the pool refills; close removes the rest', async () => {
    const t = install();
    const b = await t.open();
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
