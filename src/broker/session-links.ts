import { settingsFor } from '../config/types.js';
import type { BerthConfig } from '../setup/berth-config.js';
import type { LiveSandbox } from './live-sandboxes.js';
import { ownerAlive } from '../kit/process-owner.js';
import type { ResolvedCall } from './resolve-call.js';
import { sessionKey } from './session-calls.js';
import type { SandboxRecord } from './state/sandbox-table.js';
import type { SessionRecord, SessionTable } from './state/session-table.js';

/** How often a session's `last_seen` (and its sandbox's `last_used`) is written while calls keep coming. */
const SESSION_TOUCH_MS = 5_000;

export interface SessionLinksOptions {
  sessions: Pick<SessionTable, 'open' | 'touch' | 'ofSandbox'>;
  /** Sandbox records: a link refreshes when its sandbox was last used. */
  sandboxes: { touch(digest: string, nowMs: number): void };
  config: BerthConfig;
  /**
   * The token of this process when it holds the sessions it opens (they are closed with it, and
   * reaped if it dies); null when it does not (the CLI: sessions outlive the process).
   */
  owner: string | null;
}

/**
 * Which sessions use which sandbox, and whether a session is still live: the store's session
 * rows, linked as calls arrive and read by the reapers, the close and the views.
 */
export class SessionLinks {
  constructor(private readonly opts: SessionLinksOptions) {}

  /**
   * Opens the call's session in the store and links it to the sandbox the first time this process
   * sees the pair; afterwards only refreshes `last_seen` every few seconds (idle expiry needs no more).
   */
  link(call: ResolvedCall, live: LiveSandbox): void {
    const { sessions, sandboxes, owner } = this.opts;
    const id = sessionKey(call.scope.tenant, call.scope.profile, call.sessionRef);
    const now = Date.now();
    const seen = live.sessions.get(id);
    if (seen === undefined) {
      sessions.open(call.scope.tenant, call.scope.profile, call.sessionRef, call.spec.digest, owner, now);
      live.sessions.set(id, now);
    } else if (now - seen > SESSION_TOUCH_MS) {
      sessions.touch(call.scope.tenant, call.scope.profile, call.sessionRef, now);
      sandboxes.touch(live.digest, now);
      live.sessions.set(id, now);
    }
  }

  /** Open, and held by a live process (this one included) or used within the sandbox's idle time. */
  isLive(s: Pick<SessionRecord, 'closedMs' | 'lastSeenMs' | 'owner'>, rec: Pick<SandboxRecord, 'profile'>): boolean {
    if (s.closedMs !== null) return false;
    if (s.owner !== null) return s.owner === this.opts.owner || ownerAlive(s.owner);
    return Date.now() - s.lastSeenMs < settingsFor(this.opts.config, rec.profile ?? 'default').lifecycle.idleSeconds * 1000;
  }

  hasLiveSession(rec: SandboxRecord): boolean {
    return this.opts.sessions.ofSandbox(rec.digest).some((s) => this.isLive(s, rec));
  }
}
