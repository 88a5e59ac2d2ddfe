import { BerthError, isBerthError, isCallerError } from '../errors.js';
import type { LiveSandbox } from './live-sandboxes.js';
import type { ResolvedCall } from './resolve-call.js';
import { sessionKey, type SessionCall, type SessionCalls } from './session-calls.js';

/** What the gate asks of the sandbox pool: the call's sandbox, created or reattached. */
export interface SandboxAcquirer {
  acquire(call: ResolvedCall): Promise<LiveSandbox>;
}

/**
 * Where every call of a session (a command, a file call) passes: registered as in flight, so a
 * close of the session can tell it overtook the call, and refused its sandbox once one did.
 */
export class SessionGate {
  constructor(private readonly opts: { calls: Pick<SessionCalls, 'begin'>; pool: SandboxAcquirer }) {}

  /**
   * Runs one call of the call's session, registered so that a close of the session can tell it
   * overtook the call. An overtaken call that fails says so (its sandbox went with the close).
   */
  async run<T>(call: ResolvedCall, fn: (sc: SessionCall) => Promise<T>): Promise<T> {
    const sc = this.opts.calls.begin(sessionKey(call.scope.tenant, call.scope.profile, call.sessionRef));
    try {
      return await fn(sc);
    } catch (err) {
      // The caller's own errors say the same whether or not the close overtook the call.
      if (!sc.overtaken || (isBerthError(err) && (isCallerError(err.code) || err.code === 'session_closed'))) throw err;
      throw sessionClosedError(call, err);
    } finally {
      sc.end();
    }
  }

  /** The pool's `acquire` for a call of a session: refused once a close overtook the call. */
  async acquire(call: ResolvedCall, sc: SessionCall): Promise<LiveSandbox> {
    if (sc.overtaken) throw sessionClosedError(call);
    const ensuring = this.opts.pool.acquire(call);
    sc.ensuring = ensuring;
    let live: LiveSandbox;
    try {
      live = await ensuring;
    } finally {
      sc.ensuring = undefined;
    }
    if (sc.overtaken) throw sessionClosedError(call);
    return live;
  }
}

function sessionClosedError(call: ResolvedCall, cause?: unknown): BerthError {
  const session = call.scope.session !== undefined ? `session "${call.scope.session}"` : call.scope.task !== undefined ? `task "${call.scope.task}"` : 'the session';
  return new BerthError('session_closed',
    `${session} was closed while this call was running, and its sandbox went with it; run the call again to open the session anew`,
    cause === undefined ? undefined : { cause });
}
