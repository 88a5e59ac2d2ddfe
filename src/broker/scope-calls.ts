import { BerthError, PolicyRefusedError } from '../errors.js';
import type { CallScopeInput } from '../scope/call-scope.js';
import type { AuditRecorder } from './audit.js';
import type { BrokerExecResult, ExecOptions } from './broker-types.js';
import type { CallResolver } from './call-resolver.js';
import type { CommandRunner } from './command-runner.js';
import type { Binding } from './resolve-call.js';
import type { SandboxRemoval } from './sandbox-removal.js';
import type { CloseResult, SessionCloser } from './session-close.js';
import type { SandboxTable } from './state/sandbox-table.js';
import type { ScopeRecords } from './state/scope-records.js';
import { TaskOverrideSchema, type TaskOverride } from './task-override.js';

export interface ScopeCallsOptions {
  resolver: Pick<CallResolver, 'resolve' | 'normalize'>;
  commands: Pick<CommandRunner, 'run'>;
  audit: Pick<AuditRecorder, 'record'>;
  closer: Pick<SessionCloser, 'close'>;
  removal: Pick<SandboxRemoval, 'remove'>;
  sandboxes: Pick<SandboxTable, 'get'>;
  scopes: Pick<ScopeRecords, 'putTaskOverride'>;
  /** Throws once the broker is shutting down. */
  lifecycle: { assertOpen(): void };
}

/**
 * The broker's calls on one scope besides files and jobs: explain its binding, set a task's
 * override, run a command (audited), close its session, remove its sandbox.
 */
export class ScopeCalls {
  constructor(private readonly opts: ScopeCallsOptions) {}

  /**
   * The binding for a call: pure policy and the store's records, no engine contacted (`--parent`
   * registers its alias); with when its sandbox was hibernated, when it is.
   */
  explain(scope: CallScopeInput): Binding {
    const call = this.opts.resolver.resolve(scope);
    const hibernatedMs = this.opts.sandboxes.get(call.spec.digest)?.hibernatedMs ?? null;
    return hibernatedMs === null ? call.binding : { ...call.binding, lifecycle: { ...call.binding.lifecycle, hibernatedMs } };
  }

  /** Sets per-task overrides (image, backend, cwd, cwd source) for a task of this scope. */
  setTaskOverride(scope: CallScopeInput, override: TaskOverride): void {
    const { resolver, scopes } = this.opts;
    const s = resolver.normalize(scope);
    if (s.task === undefined) throw new PolicyRefusedError('a task override needs a task id (scope.task)');
    const parsed = TaskOverrideSchema.parse(override);
    scopes.putTaskOverride(s.tenant, s.profile, s.task, parsed, s.session ?? null);
    // Validate now so a forbidden backend is refused when it is set, not at the next call.
    resolver.resolve(s);
  }

  /** Runs one shell line in the call's sandbox, through its persistent shell; every call is audited. */
  async exec(scope: CallScopeInput, command: string, opts: ExecOptions = {}): Promise<BrokerExecResult> {
    this.opts.lifecycle.assertOpen();
    const call = this.opts.resolver.resolve(scope, { withCwd: false });
    const started = Date.now();
    const facts = { cold: false };
    let result: BrokerExecResult | undefined;
    let errorCode: string | undefined;
    try {
      result = await this.opts.commands.run(call, command, opts, facts);
      return result;
    } catch (err) {
      errorCode = err instanceof BerthError ? err.code : 'internal';
      throw err;
    } finally {
      this.opts.audit.record({
        kind: 'exec', call, command, exitCode: result?.exitCode ?? null, startedMs: started,
        outcome: { cold: facts.cold, timedOut: result?.timedOut ?? false, errorCode },
      });
    }
  }

  /** Closes the scope's session (see `SessionCloser.close`). */
  closeSession(scope: CallScopeInput): Promise<CloseResult> {
    return this.opts.closer.close(this.opts.resolver.normalize(scope));
  }

  /** Removes the call's sandbox (persistent ones too) after closing its shells; false when it has none. */
  async removeSandboxOf(scope: CallScopeInput): Promise<boolean> {
    const call = this.opts.resolver.resolve(scope);
    const rec = this.opts.sandboxes.get(call.spec.digest);
    if (rec === undefined) return false;
    await this.opts.removal.remove(rec);
    return true;
  }
}
