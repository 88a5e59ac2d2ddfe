/** One call of a session in flight in this process. */
export interface SessionCall {
  /** A close of the session began while this call ran: it must not create, recreate or reopen anything. */
  overtaken: boolean;
  /** While the call gets (or creates) its sandbox: settles when that is done. */
  ensuring: Promise<unknown> | undefined;
}

/** The identity of a session within its tenant and profile (`sessionRef` as `sessionRefOf` gives it). */
export function sessionKey(tenant: string, profile: string, sessionRef: string): string {
  return `${tenant}\0${profile}\0${sessionRef}`;
}

/**
 * The calls of each session in flight in this process, so that a close knows which calls it
 * overtook. Without this, a close that arrived while a session's first call was still creating
 * its sandbox found nothing linked yet, removed nothing, and the call then opened the session
 * and left its container running.
 */
export class SessionCalls {
  private readonly bySession = new Map<string, Set<SessionCall>>();

  /** Registers a call of `session`; `end()` when it is over (idempotent). */
  begin(session: string): SessionCall & { end(): void } {
    let set = this.bySession.get(session);
    if (set === undefined) {
      set = new Set();
      this.bySession.set(session, set);
    }
    const calls = set;
    const call: SessionCall & { end(): void } = {
      overtaken: false,
      ensuring: undefined,
      end: () => {
        calls.delete(call);
        if (calls.size === 0 && this.bySession.get(session) === calls) this.bySession.delete(session);
      },
    };
    calls.add(call);
    return call;
  }

  /** Marks every call of `session` now in flight as overtaken by a close, and returns them. */
  overtake(session: string): SessionCall[] {
    const calls = [...(this.bySession.get(session) ?? [])];
    for (const c of calls) c.overtaken = true;
    return calls;
  }
}
