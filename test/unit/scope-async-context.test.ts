import { describe, expect, it } from 'vitest';
import {
  createScopeContext,
  currentScope,
  effectiveScope,
  mergeScopes,
  runWithScope,
} from '../../src/scope/async-context.js';

describe('async scope context', () => {
  it('binds a scope for sync and async work and unbinds after', async () => {
    expect(currentScope()).toBeUndefined();
    const seen = await runWithScope({ session: 'ctx' }, async () => {
      await new Promise((r) => setTimeout(r, 1));
      return currentScope();
    });
    expect(seen).toEqual({ session: 'ctx' });
    expect(currentScope()).toBeUndefined();
  });

  it('keeps concurrent bindings apart', async () => {
    const read = (s: string) =>
      runWithScope({ session: s }, async () => {
        await new Promise((r) => setTimeout(r, 5));
        return currentScope()?.session;
      });
    expect(await Promise.all([read('a'), read('b'), read('c')])).toEqual(['a', 'b', 'c']);
  });

  it('an inner binding replaces the outer one for its duration', () => {
    runWithScope({ tenant: 't', session: 'outer' }, () => {
      runWithScope({ session: 'inner' }, () => expect(currentScope()).toEqual({ session: 'inner' }));
      expect(currentScope()).toEqual({ tenant: 't', session: 'outer' });
    });
  });

  it('copies the bound scope, so later mutation by the caller changes nothing', () => {
    const scope: { session?: string } = { session: 'a' };
    runWithScope(scope, () => {
      scope.session = 'b';
      expect(currentScope()?.session).toBe('a');
    });
  });

  it('separate contexts do not see each other', () => {
    const one = createScopeContext();
    const two = createScopeContext();
    one.runWithScope({ session: 'one' }, () => {
      expect(two.currentScope()).toBeUndefined();
      expect(currentScope()).toBeUndefined();
    });
  });
});

describe('effectiveScope', () => {
  it('uses BERTH_SESSION when nothing else gives a session', () => {
    expect(effectiveScope(undefined, 'env')).toEqual({ session: 'env' });
    expect(effectiveScope({ task: 't' }, 'env')).toEqual({ task: 't', session: 'env' });
  });

  it('the async context beats the env even when both are set', () => {
    runWithScope({ session: 'ctx' }, () => {
      expect(effectiveScope(undefined, 'env')).toEqual({ session: 'ctx' });
    });
  });

  it('an explicit argument beats the async context', () => {
    runWithScope({ session: 'ctx', tenant: 'ctx-tenant', user: 'telegram:1' }, () => {
      expect(effectiveScope({ session: 'explicit', user: 'telegram:2' }, 'env')).toEqual({
        session: 'explicit',
        tenant: 'ctx-tenant',
        user: 'telegram:2',
      });
    });
  });

  it('the env supplies only session', () => {
    expect(Object.keys(effectiveScope({}, 'env'))).toEqual(['session']);
  });

  it("treats '' as not given at every level", () => {
    expect(mergeScopes({ session: '' }, { session: '' }, 'env')).toEqual({ session: 'env' });
    expect(mergeScopes({ session: '' }, { session: 'ctx' }, 'env')).toEqual({ session: 'ctx' });
    expect(mergeScopes(undefined, undefined, '')).toEqual({});
  });

  it('merges workspace like the other fields', () => {
    const ws = { path: '/a', source: 'session' as const };
    expect(mergeScopes(undefined, { workspace: ws }, undefined)).toEqual({ workspace: ws });
    const mine = { path: '/b', source: 'session' as const };
    expect(mergeScopes({ workspace: mine }, { workspace: ws }, undefined)).toEqual({ workspace: mine });
  });

  it('parentTask travels with the task it belongs to', () => {
    // The explicit task must not pick up the bound task's parent.
    expect(mergeScopes({ task: 'mine' }, { task: 'theirs', parentTask: 'p' }, undefined)).toEqual({ task: 'mine' });
    expect(mergeScopes({}, { task: 'sub', parentTask: 'p' }, undefined)).toEqual({ task: 'sub', parentTask: 'p' });
    expect(mergeScopes({ task: 'sub', parentTask: 'p' }, { task: 'x' }, undefined)).toEqual({
      task: 'sub',
      parentTask: 'p',
    });
    // Orphan parentTask is passed on so normalizeScope reports it.
    expect(mergeScopes({ parentTask: 'p' }, undefined, undefined)).toEqual({ parentTask: 'p' });
  });
});
