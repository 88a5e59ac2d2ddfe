import type { SecretsFile } from '../policy/secrets-file.js';
import type { BerthConfig } from '../setup/berth-config.js';
import { effectiveScope } from '../scope/async-context.js';
import type { CallScope, CallScopeInput } from '../scope/call-scope.js';
import { normalizeScope } from '../scope/normalize.js';
import { registerAlias, resolveCall, type EgressFiles, type ResolveContext, type ResolvedCall } from './resolve-call.js';

/** Resolutions kept at most (the least recently used goes first). */
const MEMO_SIZE = 1024;

/**
 * Turns what a caller passes into a call of this broker: the scope (with `runWithScope` and
 * `BERTH_SESSION` applied) and its resolution against the config and the store, read at start-up.
 */
export class CallResolver {
  /** Resolutions of calls that read nothing but the config and the scope, by scope (see `resolve`). */
  private readonly memo = new Map<string, ResolvedCall>();

  constructor(
    private readonly ctx: ResolveContext & { secrets: ReadonlyMap<string, SecretsFile> },
    /** `BERTH_SESSION` as read at start-up. */
    private readonly envSession: string | undefined,
  ) {}

  /** The egress proxy's files, read at the broker's open (resolutions made before are dropped). */
  setEgressFiles(files: EgressFiles): void {
    this.ctx.egress = files;
    this.memo.clear();
  }

  normalize(scope: CallScopeInput): CallScope {
    return normalizeScope(effectiveScope(scope, this.envSession));
  }

  /** `withCwd: false` skips the start-cwd lookup (exec needs it only when a shell starts). `--parent` registers its alias. */
  resolve(scopeInput: CallScopeInput, opts: { withCwd: boolean } = { withCwd: true }): ResolvedCall {
    const scope = this.normalize(scopeInput);
    // A call without a task or a workspace reads nothing that changes while the broker is open:
    // the config, berth's environment and the secrets files are read at start-up, and no store
    // record (aliases, overrides, cwd records) or host path is consulted. So its resolution is
    // kept, frozen, and every exec of a session after the first skips the policy work. A task
    // (aliases and overrides live in the store, other processes write them) or a workspace (a
    // host path, checked afresh each time) is resolved on every call.
    const memoKey = scope.task === undefined && scope.workspace === undefined && !opts.withCwd ? keyOf(scope) : undefined;
    if (memoKey !== undefined) {
      const hit = this.memo.get(memoKey);
      if (hit !== undefined) {
        this.memo.delete(memoKey);
        this.memo.set(memoKey, hit);
        return hit;
      }
    }
    registerAlias(this.ctx.store.scopes, scope);
    const call = resolveCall(this.ctx, scope, opts);
    if (memoKey !== undefined) {
      if (this.memo.size >= MEMO_SIZE) this.memo.delete(this.memo.keys().next().value as string);
      this.memo.set(memoKey, freezeCall(call));
    }
    return call;
  }

  /** The config and secret sources calls resolve against (for the secrets a job reader's user may hold). */
  policy(): { config: BerthConfig; hostEnv: Readonly<Record<string, string | undefined>>; secrets: ReadonlyMap<string, SecretsFile> } {
    return { config: this.ctx.config, hostEnv: this.ctx.hostEnv, secrets: this.ctx.secrets };
  }
}

function keyOf(scope: CallScope): string {
  // The token too: the audit names it from the kept resolution's scope.
  return JSON.stringify([scope.tenant, scope.profile, scope.session ?? null, scope.user ?? null, scope.parentTask ?? null, scope.token?.id ?? null, scope.token?.name ?? null]);
}

/** A kept resolution is shared by every call of its scope: nothing may change it (a write throws). */
function freezeCall(call: ResolvedCall): ResolvedCall {
  for (const part of [call.binding, call.binding.envNames, call.binding.envMissing, call.scope, call.spec, call.spec.identity, call.shell, call.env, call.secretNames, call.redactValues]) {
    Object.freeze(part);
  }
  return Object.freeze(call);
}
