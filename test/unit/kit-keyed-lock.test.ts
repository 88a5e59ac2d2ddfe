import { describe, expect, it } from 'vitest';
import { KeyedLock } from '../../src/kit/keyed-lock.js';

/** A promise and the function that settles it, to hold work open until the test lets it go. */
function gate(): { wait: Promise<void>; open: () => void } {
  let open!: () => void;
  const wait = new Promise<void>((r) => (open = r));
  return { wait, open };
}

describe('KeyedLock', () => {
  it('runs work under one key one at a time, in the order it came', async () => {
    const locks = new KeyedLock();
    const order: string[] = [];
    const first = gate();
    const a = locks.run('k', async () => {
      order.push('a start');
      await first.wait;
      order.push('a end');
    });
    const b = locks.run('k', async () => {
      order.push('b');
    });
    await Promise.resolve();
    expect(order).toEqual(['a start']);
    first.open();
    await Promise.all([a, b]);
    expect(order).toEqual(['a start', 'a end', 'b']);
  });

  it('runs work under other keys alongside', async () => {
    const locks = new KeyedLock();
    const held = gate();
    const a = locks.run('one', () => held.wait);
    // Would never settle if 'two' queued behind 'one'.
    await expect(locks.run('two', async () => 'ran')).resolves.toBe('ran');
    held.open();
    await a;
  });

  it('a failure ends only its own turn: the caller sees it, the next work still runs', async () => {
    const locks = new KeyedLock();
    const failed = locks.run('k', async () => {
      throw new Error('boom');
    });
    const next = locks.run('k', async () => 'next');
    await expect(failed).rejects.toThrow('boom');
    await expect(next).resolves.toBe('next');
  });

  it('holds no key once its work is done, failed work included', async () => {
    const locks = new KeyedLock();
    await Promise.allSettled([
      locks.run('a', async () => undefined),
      locks.run('b', async () => Promise.reject(new Error('x'))),
    ]);
    await new Promise((r) => setImmediate(r));
    expect(locks.size).toBe(0);
  });
});
