import { describe, expect, it, onTestFinished } from 'vitest';
import { StateStore } from '../../src/broker/state/state-store.js';
import { tempDir } from '../helpers/temp-dir.js';

/* Who holds a sandbox's egress listener, in a real SQLite state store shared by two connections (two processes). */

describe('egress_listeners', () => {
  const open = (home: string): StateStore => {
    const s = StateStore.open(home);
    onTestFinished(() => s.close());
    return s;
  };

  it('the first claim wins; a live holder keeps it against another with its digest said; a dead one is replaced; release is the holder\'s only', () => {
    const home = tempDir();
    const [a, b] = [open(home).egressListeners, open(home).egressListeners];
    const dead = new Set<string>();
    const isDead = (h: string): boolean => dead.has(h);
    expect(a.claim('ref-1', 'A', 'd1', 1, isDead)).toBe('mine');
    // Again by its holder (a later call, another context): still its, the digest updated.
    expect(a.claim('ref-1', 'A', 'd2', 2, isDead)).toBe('mine');
    expect(b.claim('ref-1', 'B', 'd1', 3, isDead)).toEqual({ holder: 'A', digest: 'd2' });
    // B's release does not let go of A's.
    b.release('ref-1', 'B');
    expect(b.get('ref-1')).toEqual({ holder: 'A', digest: 'd2' });
    dead.add('A');
    expect(b.claim('ref-1', 'B', 'd1', 4, isDead)).toBe('mine');
    expect(a.get('ref-1')).toEqual({ holder: 'B', digest: 'd1' });
    b.release('ref-1', 'B');
    expect(a.get('ref-1')).toBeUndefined();
    expect(a.claim('ref-1', 'A2', 'd3', 5, isDead)).toBe('mine');
  });

  it('a row taken from a holder is handed back only by the one that holds it now, with the digest it had', () => {
    const home = tempDir();
    const [a, b] = [open(home).egressListeners, open(home).egressListeners];
    expect(a.claim('ref-1', 'CALL', 'd1', 1, () => false)).toBe('mine');
    // The keeper takes the call's row (the call passed its socket: treated as gone).
    expect(b.claim('ref-1', 'KEEPER', 'd2', 2, (h) => h === 'CALL')).toBe('mine');
    expect(a.handBack('ref-1', 'OTHER', { holder: 'CALL', digest: 'd1' })).toBe(false);
    expect(a.get('ref-1')).toEqual({ holder: 'KEEPER', digest: 'd2' });
    expect(b.handBack('ref-1', 'KEEPER', { holder: 'CALL', digest: 'd1' })).toBe(true);
    expect(a.get('ref-1')).toEqual({ holder: 'CALL', digest: 'd1' });
  });
});
