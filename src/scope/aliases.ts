import { PolicyRefusedError } from '../errors.js';

/**
 * Subagent aliases: `child -> parent`. `parentOf(child)` returns the parent task id, `''` for
 * a task aliased to nothing (it follows the default sandbox), or `undefined` when the task has
 * no alias (it is a root).
 */
export type ParentOf = (child: string) => string | undefined;

/** Longest alias chain followed, in hops (child -> parent). */
export const MAX_ALIAS_DEPTH = 64;

export interface RootResolution {
  /** The task whose sandbox `task` uses, or undefined when the chain ends in an alias to nothing. */
  root: string | undefined;
  /** Every task visited, starting with `task` itself (the root, when there is one, is in it). */
  chain: string[];
}

type Walk =
  | { end: 'root'; chain: string[] }
  | { end: 'nothing'; chain: string[] }
  | { end: 'cycle'; chain: string[]; cycle: string[] }
  | { end: 'too-deep'; chain: string[] };

function walk(start: string, parentOf: ParentOf): Walk {
  const chain = [start];
  const seen = new Set(chain);
  let current = start;
  while (true) {
    const parent = parentOf(current);
    if (parent === undefined) return { end: 'root', chain };
    if (parent === '') return { end: 'nothing', chain };
    if (seen.has(parent)) return { end: 'cycle', chain, cycle: chain.slice(chain.indexOf(parent)) };
    if (chain.length > MAX_ALIAS_DEPTH) return { end: 'too-deep', chain };
    chain.push(parent);
    seen.add(parent);
    current = parent;
  }
}

/**
 * Follow the alias chain of `task` to its end.
 *
 * Termination: a cycle (which registration refuses, but a store may still hold after a race or
 * by hand) stops at the first repeated task. Its root is the smallest task id of the cycle
 * (by UTF-16 code units), so every member of a cycle, and every chain that runs into it,
 * agrees on one sandbox whatever task it started from.
 *
 * @example
 * resolveRoot('c', (t) => ({ c: 'b', b: 'a' })[t]) // { root: 'a', chain: ['c', 'b', 'a'] }
 * @throws PolicyRefusedError when the chain is longer than MAX_ALIAS_DEPTH hops.
 */
export function resolveRoot(task: string, parentOf: ParentOf): RootResolution {
  const result = walk(task, parentOf);
  switch (result.end) {
    case 'root':
      return { root: result.chain[result.chain.length - 1], chain: result.chain };
    case 'nothing':
      return { root: undefined, chain: result.chain };
    case 'cycle':
      return { root: [...result.cycle].sort()[0], chain: result.chain };
    case 'too-deep':
      throw new PolicyRefusedError(
        `task "${task}" has a subagent alias chain longer than ${MAX_ALIAS_DEPTH}; ` +
          'register subagents against their root task instead of chaining them',
      );
  }
}

/** True when aliasing `child -> parent` would close a cycle (including `child === parent`). */
export function wouldCreateCycle(child: string, parent: string, parentOf: ParentOf): boolean {
  if (parent === '') return false;
  if (child === parent) return true;
  return walk(parent, parentOf).chain.includes(child);
}

/**
 * Refuse an alias that would close a cycle or make the chain too long to follow.
 * `parent === ''` (alias to nothing) is always allowed.
 */
export function assertAliasAllowed(child: string, parent: string, parentOf: ParentOf): void {
  if (parent === '') return;
  if (wouldCreateCycle(child, parent, parentOf)) {
    throw new PolicyRefusedError(
      `task "${child}" cannot be a subagent of "${parent}": "${parent}" already follows "${child}", ` +
        'so the alias would close a cycle',
    );
  }
  const parentWalk = walk(parent, parentOf);
  if (parentWalk.end === 'too-deep' || parentWalk.chain.length > MAX_ALIAS_DEPTH) {
    throw new PolicyRefusedError(
      `task "${child}" cannot be a subagent of "${parent}": the alias chain would be longer than ` +
        `${MAX_ALIAS_DEPTH}; register it against the root task instead`,
    );
  }
}
