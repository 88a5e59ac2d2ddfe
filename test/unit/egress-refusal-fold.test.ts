import { describe, expect, it } from 'vitest';
import { RefusalFold } from '../../src/egress/refusal-fold.js';

describe('egress: folding repeated refusals (RefusalFold)', () => {
  it('records the first refusal of a key, folds the rest of its interval, and counts them into the next record', () => {
    let now = 1_000_000;
    const fold = new RefusalFold(60_000, () => now);
    expect(fold.take('a')).toEqual({ folded: 0 });
    expect(fold.take('a')).toBeUndefined();
    now += 59_999;
    expect(fold.take('a')).toBeUndefined();
    // Another key has an interval of its own.
    expect(fold.take('b')).toEqual({ folded: 0 });
    now += 1;
    expect(fold.take('a')).toEqual({ folded: 2 });
    expect(fold.take('a')).toBeUndefined();
  });

  it('drain gives what was folded since the last record and forgets the key', () => {
    let now = 0;
    const fold = new RefusalFold(60_000, () => now);
    expect(fold.drain('a')).toBe(0);
    fold.take('a');
    fold.take('a');
    fold.take('a');
    expect(fold.drain('a')).toBe(2);
    expect(fold.drain('a')).toBe(0);
    now += 1;
    expect(fold.take('a')).toEqual({ folded: 0 });
  });
});
