import { describe, expect, it } from 'vitest';
import { StartGate } from '../../src/broker/start-gate.js';

/** A promise with its resolve and reject, to settle starts in a chosen order. */
function deferred(): { promise: Promise<void>; resolve: () => void; reject: (e: Error) => void } {
  let resolve!: () => void;
  let reject!: (e: Error) => void;
  const promise = new Promise<void>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

const tick = (): Promise<void> => new Promise((r) => setImmediate(r));

describe('StartGate', () => {
  it('runs at most its width at once, and the rest in the order they came', async () => {
    const gate = new StartGate(2);
    const work = Array.from({ length: 5 }, () => deferred());
    const began: number[] = [];
    const runs = work.map((d, i) => gate.run(async () => {
      began.push(i);
      await d.promise;
      return i;
    }));
    await tick();
    expect(began).toEqual([0, 1]);
    expect(gate.queued).toBe(3);
    work[1]!.resolve();
    await tick();
    expect(began).toEqual([0, 1, 2]);
    work[0]!.resolve();
    work[2]!.resolve();
    await tick();
    await tick();
    expect(began).toEqual([0, 1, 2, 3, 4]);
    work[3]!.resolve();
    work[4]!.resolve();
    expect(await Promise.all(runs)).toEqual([0, 1, 2, 3, 4]);
    expect(gate.queued).toBe(0);
  });

  it('a start that fails passes its slot on and rejects only its own caller', async () => {
    const gate = new StartGate(1);
    const first = deferred();
    const failing = gate.run(() => first.promise);
    const next = gate.run(async () => 'next ran');
    first.reject(new Error('engine said no'));
    await expect(failing).rejects.toThrow('engine said no');
    expect(await next).toBe('next ran');
  });

  it('a start arriving while the slot is handed over waits behind those already queued', async () => {
    const gate = new StartGate(1);
    const first = deferred();
    const order: string[] = [];
    const a = gate.run(async () => {
      await first.promise;
      order.push('a');
    });
    const b = gate.run(async () => {
      order.push('b');
    });
    first.resolve();
    const c = gate.run(async () => {
      order.push('c');
    });
    await Promise.all([a, b, c]);
    expect(order).toEqual(['a', 'b', 'c']);
  });

  it('refuses a width below 1, naming it', () => {
    expect(() => new StartGate(0)).toThrow('a start gate needs a width of at least 1, got 0');
    expect(StartGate.forThisMachine().width).toBeGreaterThanOrEqual(4);
  });
});
