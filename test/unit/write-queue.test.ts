import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { describeWriteEvent, WriteQueue, type WriteEvent } from '../../src/broker/state/write-queue.js';

/** A queue over a write the test can make refuse; what it wrote, in batches, and what it reported. */
function queue(keep: number, size?: (n: number) => number) {
  const batches: number[][] = [];
  const events: WriteEvent[] = [];
  let refusing = false;
  let tries = 0;
  const q = new WriteQueue<number>((batch) => {
    tries++;
    if (refusing) throw new Error('database or disk is full');
    batches.push([...batch]);
  }, { keep, ...(size === undefined ? {} : { size }), report: (e) => void events.push(e) });
  return { q, batches, events, refuse: (on: boolean) => void (refusing = on), tries: () => tries };
}

const addAll = (q: WriteQueue<number>, from: number, to: number) => {
  for (let i = from; i < to; i++) q.add(i);
};

describe('a write queue whose writes fail', () => {
  beforeEach(() => void vi.useFakeTimers());
  afterEach(() => void vi.useRealTimers());

  it('keeps what it could not write, never throws at the caller or from its timer, and writes it once the write takes it', () => {
    const { q, batches, events, refuse } = queue(100);
    refuse(true);
    addAll(q, 0, 3);
    expect(() => vi.advanceTimersByTime(50)).not.toThrow();
    expect(events).toEqual([{ kind: 'failing', error: new Error('database or disk is full'), waiting: 3, dropped: 0 }]);
    expect(() => q.flush()).not.toThrow();
    refuse(false);
    q.add(3);
    vi.advanceTimersByTime(1_000);
    expect(batches).toEqual([[0, 1, 2, 3]]);
    expect(events.at(-1)).toEqual({ kind: 'recovered', dropped: 0 });
  });

  it('while failing, a call never writes (only the retry does, once a second), and past `keep` the oldest go, reported at the next try', () => {
    const { q, batches, events, refuse, tries } = queue(100);
    refuse(true);
    q.add(0);
    vi.advanceTimersByTime(50);
    expect(tries()).toBe(1);
    // 500 more: past the 200 at which a healthy queue writes at once, and past what is kept.
    addAll(q, 1, 501);
    expect(tries()).toBe(1);
    vi.advanceTimersByTime(1_000);
    expect(tries()).toBe(2);
    expect(events.at(-1)).toEqual({ kind: 'dropping', waiting: 100, dropped: 401 });
    expect(q.backlog).toEqual({ unwritten: 100, dropped: 401 });
    refuse(false);
    vi.advanceTimersByTime(1_000);
    expect(batches).toEqual([Array.from({ length: 100 }, (_, i) => 401 + i)]);
    expect(events.at(-1)).toEqual({ kind: 'recovered', dropped: 0 });
    // What it dropped stays counted (a counter's source); nothing is held back any more.
    expect(q.backlog).toEqual({ unwritten: 0, dropped: 401 });
  });

  it('sizes entries only while writes fail: a healthy call pays nothing for the bound', () => {
    let sized = 0;
    const { q, batches, refuse } = queue(10, (n) => {
      sized++;
      return n;
    });
    addAll(q, 1, 4);
    vi.advanceTimersByTime(50);
    expect(sized).toBe(0);
    refuse(true);
    q.add(6);
    q.add(4);
    vi.advanceTimersByTime(50);
    expect(sized).toBe(2);
    q.add(3);
    expect(sized).toBe(4);
    refuse(false);
    vi.advanceTimersByTime(1_000);
    expect(batches).toEqual([[1, 2, 3], [4, 3]]);
    q.add(9);
    vi.advanceTimersByTime(50);
    expect(sized).toBe(4);
  });

  it('while failing, a read\'s flush writes nothing (only the retry does): no read waits on a file that refuses', () => {
    const { q, refuse, tries } = queue(100);
    refuse(true);
    q.add(0);
    vi.advanceTimersByTime(50);
    q.flush();
    q.flush();
    expect(tries()).toBe(1);
  });

  it('drops are said at most once a minute, counted in between', () => {
    const { q, events, refuse } = queue(1);
    refuse(true);
    q.add(0);
    vi.advanceTimersByTime(50);
    q.add(1);
    vi.advanceTimersByTime(1_000);
    expect(events.at(-1)).toEqual({ kind: 'dropping', waiting: 1, dropped: 1 });
    q.add(2);
    q.add(3);
    vi.advanceTimersByTime(30_000);
    expect(events).toHaveLength(2);
    vi.advanceTimersByTime(30_000);
    expect(events.at(-1)).toEqual({ kind: 'dropping', waiting: 1, dropped: 2 });
  });

  it('keeps by size where it is given one: the oldest go until what is kept fits', () => {
    const { q, batches, refuse } = queue(10, (n) => n);
    refuse(true);
    q.add(6);
    vi.advanceTimersByTime(50);
    q.add(3);
    q.add(4);
    refuse(false);
    vi.advanceTimersByTime(1_000);
    expect(batches).toEqual([[3, 4]]);
  });

  it('a report that reads or adds finds the queue settled: no second try from inside it, and its entry is written', () => {
    const batches: number[][] = [];
    let refusing = true;
    let tries = 0;
    const q: WriteQueue<number> = new WriteQueue<number>((batch) => {
      tries++;
      if (refusing) throw new Error('busy');
      batches.push([...batch]);
    }, { keep: 100, report: (e) => {
      q.flush();
      if (e.kind === 'recovered') q.add(99);
    } });
    q.add(0);
    vi.advanceTimersByTime(50);
    expect(tries).toBe(1);
    refusing = false;
    vi.advanceTimersByTime(1_000);
    vi.advanceTimersByTime(50);
    expect(batches).toEqual([[0], [99]]);
  });

  it('keeping none (stamps): a failed batch goes, and the next entries are written as usual', () => {
    const { q, batches, refuse } = queue(0);
    refuse(true);
    addAll(q, 0, 2);
    vi.advanceTimersByTime(50);
    refuse(false);
    q.add(2);
    vi.advanceTimersByTime(50);
    expect(batches).toEqual([[2]]);
  });

  it('closed while failing: it tries once more, and what it still cannot write is reported lost (what was dropped before, as dropped)', () => {
    const { q, events, refuse } = queue(2);
    refuse(true);
    q.add(0);
    vi.advanceTimersByTime(50);
    addAll(q, 1, 4);
    q.close();
    expect(events.slice(1)).toEqual([{ kind: 'dropping', waiting: 2, dropped: 2 }, { kind: 'lost', dropped: 2 }]);
    expect(vi.getTimerCount()).toBe(0);
    expect(q.backlog).toEqual({ unwritten: 0, dropped: 4 });
  });

  it('says what failed, what is kept, what was lost and what to do', () => {
    expect(describeWriteEvent('the audit', { kind: 'failing', error: new Error('database or disk is full'), waiting: 10, dropped: 2 })).toBe(
      'the audit could not be written to state.db (database or disk is full); its 10 newest entries are kept in memory and tried again every 1 s; ' +
        "2 entries were dropped (the oldest, past what is kept). Free the disk or fix the file's permissions (berth home, state.db)",
    );
    expect(describeWriteEvent('the audit', { kind: 'lost', dropped: 5 })).toBe('the audit could not be written to state.db at close: 5 entries are lost');
  });
});
