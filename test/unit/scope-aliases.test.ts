import { describe, expect, it } from 'vitest';
import { PolicyRefusedError } from '../../src/errors.js';
import {
  MAX_ALIAS_DEPTH,
  assertAliasAllowed,
  resolveRoot,
  wouldCreateCycle,
} from '../../src/scope/aliases.js';

const aliases = (map: Record<string, string>) => (child: string) => (Object.hasOwn(map, child) ? map[child] : undefined);

describe('resolveRoot', () => {
  it('a task without an alias is its own root', () => {
    expect(resolveRoot('t', aliases({}))).toEqual({ root: 't', chain: ['t'] });
  });

  it('follows the chain child -> parent to its end', () => {
    expect(resolveRoot('c', aliases({ c: 'b', b: 'a' }))).toEqual({ root: 'a', chain: ['c', 'b', 'a'] });
  });

  it('an alias to nothing gives no root', () => {
    expect(resolveRoot('c', aliases({ c: 'b', b: '' }))).toEqual({ root: undefined, chain: ['c', 'b'] });
    expect(resolveRoot('c', aliases({ c: '' }))).toEqual({ root: undefined, chain: ['c'] });
  });

  it('terminates on a cycle; every member of the cycle gets the same root (its smallest id)', () => {
    const parentOf = aliases({ b: 'c', c: 'a', a: 'b', x: 'c' });
    expect(resolveRoot('a', parentOf)).toEqual({ root: 'a', chain: ['a', 'b', 'c'] });
    expect(resolveRoot('b', parentOf).root).toBe('a');
    expect(resolveRoot('c', parentOf).root).toBe('a');
    // A chain that runs into the cycle lands there too.
    expect(resolveRoot('x', parentOf)).toEqual({ root: 'a', chain: ['x', 'c', 'a', 'b'] });
    expect(resolveRoot('s', aliases({ s: 's' }))).toEqual({ root: 's', chain: ['s'] });
  });

  it(`follows ${MAX_ALIAS_DEPTH} hops and refuses a longer chain`, () => {
    const chainOf = (hops: number) => {
      const map: Record<string, string> = {};
      for (let i = 0; i < hops; i++) map[`t${i}`] = `t${i + 1}`;
      return aliases(map);
    };
    expect(resolveRoot('t0', chainOf(MAX_ALIAS_DEPTH)).root).toBe(`t${MAX_ALIAS_DEPTH}`);
    expect(() => resolveRoot('t0', chainOf(MAX_ALIAS_DEPTH + 1))).toThrow(PolicyRefusedError);
  });
});

describe('wouldCreateCycle', () => {
  const parentOf = aliases({ c: 'b', b: 'a', z: '' });
  it('detects a cycle through the chain and a self-alias', () => {
    expect(wouldCreateCycle('a', 'c', parentOf)).toBe(true);
    expect(wouldCreateCycle('b', 'c', parentOf)).toBe(true);
    expect(wouldCreateCycle('a', 'a', parentOf)).toBe(true);
  });
  it('allows a tree edge and an alias to nothing', () => {
    expect(wouldCreateCycle('d', 'c', parentOf)).toBe(false);
    expect(wouldCreateCycle('a', 'z', parentOf)).toBe(false);
    expect(wouldCreateCycle('a', '', parentOf)).toBe(false);
  });
  it('terminates when the store already holds a cycle', () => {
    expect(wouldCreateCycle('d', 'p', aliases({ p: 'q', q: 'p' }))).toBe(false);
  });
});

describe('assertAliasAllowed', () => {
  it('refuses a cycle and a chain that would be too deep', () => {
    expect(() => assertAliasAllowed('a', 'c', aliases({ c: 'b', b: 'a' }))).toThrow(/close a cycle/);
    const map: Record<string, string> = {};
    for (let i = 0; i < MAX_ALIAS_DEPTH; i++) map[`t${i}`] = `t${i + 1}`;
    expect(() => assertAliasAllowed('new', 't0', aliases(map))).toThrow(/longer than/);
    expect(() => assertAliasAllowed('new', 't1', aliases(map))).not.toThrow();
    expect(() => assertAliasAllowed('a', '', aliases({}))).not.toThrow();
  });
});
