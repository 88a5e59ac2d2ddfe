import { describe, expect, it } from 'vitest';
import { StateStore } from '../../src/broker/state/state-store.js';
import { storeLease } from '../../src/broker/store-lease.js';
import { TimeoutError } from '../../src/errors.js';
import { tempDir } from '../helpers/temp-dir.js';

describe('leases across the processes of one installation', () => {
  it('one holder at a time; a dead holder is replaced by exactly one taker; release only by the holder', () => {
    const home = tempDir('berth-lease-');
    const a = StateStore.open(home);
    const b = StateStore.open(home);
    try {
      const noneDead = () => false;
      expect(a.leases.take('n', 'A', 1, noneDead)).toBe(true);
      expect(b.leases.take('n', 'B', 2, noneDead)).toBe(false);
      b.leases.release('n', 'B'); // not B's: no effect
      expect(b.leases.take('n', 'B', 3, noneDead)).toBe(false);
      const dead = (h: string) => h === 'A';
      expect(b.leases.take('n', 'B', 4, dead)).toBe(true);
      expect(a.leases.take('n', 'C', 5, dead)).toBe(false);
      b.leases.release('n', 'B');
      expect(a.leases.take('n', 'C', 6, noneDead)).toBe(true);
      expect(a.leases.take('other', 'D', 7, noneDead)).toBe(true);
    } finally {
      a.close();
      b.close();
    }
  });

  it('storeLease serialises holders of two store handles (two processes) and times out with a clear error', async () => {
    const home = tempDir('berth-lease-');
    const a = StateStore.open(home);
    const b = StateStore.open(home);
    try {
      const [la, lb] = [storeLease(a.leases), storeLease(b.leases)];
      let inside = 0;
      let overlapped = false;
      const work = async () => {
        inside++;
        if (inside > 1) overlapped = true;
        await new Promise((r) => setTimeout(r, 20));
        inside--;
      };
      await Promise.all([la('x', work), lb('x', work), la('x', work), lb('x', work)]);
      expect(overlapped).toBe(false);

      let unblock!: () => void;
      const held = la('y', () => new Promise<void>((r) => { unblock = r; }));
      const err = await storeLease(b.leases, { waitMs: 100 })('y', async () => 'got it').catch((e: unknown) => e);
      expect(err).toBeInstanceOf(TimeoutError);
      expect((err as Error).message).toMatch(/lease "y" is held by another berth process/);
      unblock();
      await held;
      expect(await lb('y', async () => 'got it')).toBe('got it');
    } finally {
      a.close();
      b.close();
    }
  });
});
