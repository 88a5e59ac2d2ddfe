import type { SecretsFile } from '../config/secrets-file.js';
import type { BerthConfig } from '../config/types.js';
import { effectiveScope } from '../scope/async-context.js';
import type { CallScope, CallScopeInput } from '../scope/call-scope.js';
import { normalizeScope } from '../scope/normalize.js';
import { registerAlias, resolveCall, type ResolveContext, type ResolvedCall } from './resolve-call.js';

/**
 * Turns what a caller passes into a call of this broker: the scope (with `runWithScope` and
 * `BERTH_SESSION` applied) and its resolution against the config and the store, read at start-up.
 */
export class CallResolver {
  constructor(
    private readonly ctx: ResolveContext & { secrets: ReadonlyMap<string, SecretsFile> },
    /** `BERTH_SESSION` as read at start-up. */
    private readonly envSession: string | undefined,
  ) {}

  normalize(scope: CallScopeInput): CallScope {
    return normalizeScope(effectiveScope(scope, this.envSession));
  }

  /** `withCwd: false` skips the start-cwd lookup (exec needs it only when a shell starts). `--parent` registers its alias. */
  resolve(scopeInput: CallScopeInput, opts: { withCwd: boolean } = { withCwd: true }): ResolvedCall {
    const scope = this.normalize(scopeInput);
    registerAlias(this.ctx.store, scope);
    return resolveCall(this.ctx, scope, opts);
  }

  /** The config and secret sources calls resolve against (for the secrets a job reader's user may hold). */
  policy(): { config: BerthConfig; hostEnv: Readonly<Record<string, string | undefined>>; secrets: ReadonlyMap<string, SecretsFile> } {
    return { config: this.ctx.config, hostEnv: this.ctx.hostEnv, secrets: this.ctx.secrets };
  }
}
