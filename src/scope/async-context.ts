import { AsyncLocalStorage } from 'node:async_hooks';
import type { CallScopeInput } from './call-scope.js';

/** A scope bound for the duration of a callback, for library callers (docs/design.md §2). */
export interface ScopeContext {
  /** Run `fn` with `scope` bound; an inner call replaces the outer binding for its duration. */
  runWithScope<T>(scope: CallScopeInput, fn: () => T): T;
  /** The bound scope, or undefined outside any `runWithScope`. */
  currentScope(): CallScopeInput | undefined;
  /**
   * The scope a call runs with, field by field: the explicit argument beats the bound scope,
   * which beats `BERTH_SESSION` (which only ever supplies `session`).
   */
  effectiveScope(explicit: CallScopeInput | undefined, envSession: string | undefined): CallScopeInput;
}

const FIELDS = ['tenant', 'profile', 'session', 'user', 'workspace', 'token'] as const;

/** A fresh, independent scope context (tests, or a host embedding two brokers). */
export function createScopeContext(): ScopeContext {
  const storage = new AsyncLocalStorage<Readonly<CallScopeInput>>();
  const currentScope = (): CallScopeInput | undefined => storage.getStore();
  return {
    runWithScope: (scope, fn) => storage.run(Object.freeze({ ...scope }), fn),
    currentScope,
    effectiveScope: (explicit, envSession) => mergeScopes(explicit, currentScope(), envSession),
  };
}

/**
 * Field-wise precedence: explicit > bound > env. `''` counts as not given, as in
 * `normalizeScope`. `parentTask` is not merged on its own: it travels with the `task` it
 * belongs to, so an explicit task never picks up the bound task's parent (which would register
 * the wrong alias).
 */
export function mergeScopes(
  explicit: CallScopeInput | undefined,
  bound: CallScopeInput | undefined,
  envSession: string | undefined,
): CallScopeInput {
  const sources = [explicit ?? {}, bound ?? {}];
  const out: CallScopeInput = {};
  for (const field of FIELDS) {
    const source = sources.find((s) => isGiven(s[field]));
    if (source !== undefined) Object.assign(out, { [field]: source[field] });
  }
  if (out.session === undefined && isGiven(envSession)) out.session = envSession;

  const taskSource = sources.find((s) => isGiven(s.task));
  if (taskSource !== undefined) {
    out.task = taskSource.task;
    if (isGiven(taskSource.parentTask)) out.parentTask = taskSource.parentTask;
  } else {
    // A parentTask without a task is kept so that normalizeScope reports it.
    const orphan = sources.find((s) => isGiven(s.parentTask));
    if (orphan !== undefined) out.parentTask = orphan.parentTask;
  }
  return out;
}

function isGiven(value: unknown): boolean {
  if (value === undefined || value === null || value === '') return false;
  if (typeof value === 'object') {
    // A token is given when present; a workspace when it names a path.
    if ('id' in value) return true;
    const path = (value as { path?: unknown }).path;
    return path !== undefined && path !== '';
  }
  return true;
}

/**
 * The process-wide context. The one piece of module state in berth's scope code, and it holds
 * nothing between calls: a binding lives only inside its `runWithScope` callback.
 */
const processContext = createScopeContext();

/**
 * Bind `scope` for everything `fn` calls, synchronously or asynchronously.
 *
 * @example
 * await runWithScope({ session: 'chat-42' }, () => berth.run('ls'));
 */
export function runWithScope<T>(scope: CallScopeInput, fn: () => T): T {
  return processContext.runWithScope(scope, fn);
}

/** The scope bound by the innermost enclosing `runWithScope`, if any. */
export function currentScope(): CallScopeInput | undefined {
  return processContext.currentScope();
}

/**
 * Explicit argument beats the bound scope beats `BERTH_SESSION`, field by field.
 *
 * @example
 * runWithScope({ session: 'ctx' }, () => effectiveScope(undefined, 'env')) // { session: 'ctx' }
 */
export function effectiveScope(explicit: CallScopeInput | undefined, envSession: string | undefined): CallScopeInput {
  return processContext.effectiveScope(explicit, envSession);
}
