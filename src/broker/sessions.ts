import { BerthError, isBerthError } from '../errors.js';
import { removeSessionStaging } from '../files/staging.js';
import type { CallScope } from '../scope/call-scope.js';
import { settingsFor, type BerthConfig } from '../config/types.js';
import type { AuditRecorder } from './audit.js';
import { ownerAlive } from './process-owner.js';
import { sessionRefOf, type ResolvedCall } from './resolve-call.js';
import type { LiveSandbox, SandboxPool } from './sandbox-pool.js';
import { SessionCalls, sessionKey, type SessionCall } from './session-calls.js';
import type { SandboxRecord } from './state/sandbox-table.js';
import type { SessionRecord } from './state/session-table.js';
import type { StateStore } from './state/state-store.js';

const SESSION_TOUCH_MS = 5_000;

/** Errors of the caller's own making: reported as they are, even when a close overtook the call. */
const CALLER_ERRORS = new Set(['usage', 'policy_refused', 'too_large', 'path_not_found', 'session_closed']);

export interface CloseResult {
  /** Keys of the ephemeral sandboxes this close removed. */
  removed: string[];
  /** Keys of the sandboxes kept (persistent, or still used by another open session). */
  kept: string[];
}

export interface SessionRegistryOptions {
  store: StateStore;
  config: BerthConfig;
  berthHome: string;
  /**
   * The token of this process when it holds the sessions it opens (they are closed with it, and
   * reaped if it dies); null when it does not (the CLI: sessions outlive the process).
   */
  owner: string | null;
  pool: SandboxPool;
  audit: AuditRecorder;
  log: (namespace: string, message: string) => void;
}

/**
 * The sessions of one broker: which sandboxes each uses and who holds it (the store's session
 * rows, linked as calls arrive), whether one is still live, its calls in flight, and its close.
 */
export class SessionRegistry {
  private readonly calls = new SessionCalls();

  constructor(private readonly opts: SessionRegistryOptions) {}

  /**
   * Opens the call's session in the store and links it to the sandbox the first time this process
   * sees the pair; afterwards only refreshes `last_seen` every few seconds (idle expiry needs no more).
   */
  link(call: ResolvedCall, live: LiveSandbox): void {
    const { store, owner } = this.opts;
    const id = sessionKey(call.scope.tenant, call.scope.profile, call.sessionRef);
    const now = Date.now();
    const seen = live.sessions.get(id);
    if (seen === undefined) {
      store.sessions.open(call.scope.tenant, call.scope.profile, call.sessionRef, call.spec.digest, owner, now);
      live.sessions.set(id, now);
    } else if (now - seen > SESSION_TOUCH_MS) {
      store.sessions.touch(call.scope.tenant, call.scope.profile, call.sessionRef, now);
      store.sandboxes.touch(live.digest, now);
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
    return this.opts.store.sessions.ofSandbox(rec.digest).some((s) => this.isLive(s, rec));
  }

  /**
   * Runs one call of the call's session, registered so that a close of the session can tell it
   * overtook the call. An overtaken call that fails says so (its sandbox went with the close).
   */
  async run<T>(call: ResolvedCall, fn: (sc: SessionCall) => Promise<T>): Promise<T> {
    const sc = this.calls.begin(sessionKey(call.scope.tenant, call.scope.profile, call.sessionRef));
    try {
      return await fn(sc);
    } catch (err) {
      if (!sc.overtaken || (isBerthError(err) && CALLER_ERRORS.has(err.code))) throw err;
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

  /**
   * Closes a session: its shells, cwd records, aliases and overrides; removes ephemeral sandboxes no
   * other open session uses. The subagents registered under the session's task (and theirs) belong
   * to its conversation: they are closed first, so they no longer hold the sandbox they share.
   */
  async close(s: CallScope): Promise<CloseResult> {
    const ref = sessionRefOf(s);
    const results: CloseResult[] = [];
    for (const child of subagentSessionRefs(this.opts.store, s, ref)) {
      results.push(await this.closeRef(s.tenant, s.profile, child, s));
    }
    results.push(await this.closeRef(s.tenant, s.profile, ref, s));
    const removed = [...new Set(results.flatMap((r) => r.removed))];
    const kept = [...new Set(results.flatMap((r) => r.kept))].filter((k) => !removed.includes(k));
    return { removed, kept };
  }

  /** Closes one session by its ref (`sessionRefOf`); `scope` names the user for the audit entry. */
  async closeRef(tenant: string, profile: string, sessionRef: string, scope?: CallScope): Promise<CloseResult> {
    const { store, pool, berthHome } = this.opts;
    const started = Date.now();
    const id = sessionKey(tenant, profile, sessionRef);
    // The session's calls under way may not outlive the close with a sandbox of their own: from now
    // on none creates, recreates or reopens anything, and those still getting their sandbox are
    // waited for, so what they create is linked to the session by then and removed below.
    const overtaken = this.calls.overtake(id);
    await Promise.all(overtaken.map((c) => c.ensuring?.catch(() => undefined)));
    for (const live of pool.all()) {
      live.sessions.delete(id);
      await live.shells.closeSession(tenant, profile, sessionRef);
    }
    const digests = store.sessions.close(tenant, profile, sessionRef, Date.now());
    await removeSessionStaging(berthHome, { tenant, profile, sessionRef }).catch((e) => this.opts.log('berth:files', `remove staging of ${sessionRef}: ${String(e)}`));
    const result: CloseResult = { removed: [], kept: [] };
    for (const digest of digests) {
      const rec = store.sandboxes.get(digest);
      if (rec === undefined) continue;
      if (rec.ephemeral && !this.hasLiveSession(rec)) {
        await pool.remove(rec);
        result.removed.push(rec.key);
      } else {
        result.kept.push(rec.key);
      }
    }
    this.opts.audit.record({ kind: 'close', tenant, profile, user: scope?.user ?? null, sessionRef, startedMs: started });
    return result;
  }

  /** At shutdown: closes the sessions this process holds and lets go of them. */
  async closeHeld(): Promise<void> {
    const { store, owner } = this.opts;
    if (owner === null) return;
    for (const s of store.sessions.list()) {
      if (s.owner === owner && s.closedMs === null) {
        await this.closeRef(s.tenant, s.profile, s.session).catch((e) => this.opts.log('berth:broker', `close ${s.session}: ${String(e)}`));
      }
    }
    store.sessions.releaseHeldBy(owner);
  }
}

function sessionClosedError(call: ResolvedCall, cause?: unknown): BerthError {
  const session = call.scope.session !== undefined ? `session "${call.scope.session}"` : call.scope.task !== undefined ? `task "${call.scope.task}"` : 'the session';
  return new BerthError('session_closed',
    `${session} was closed while this call was running, and its sandbox went with it; run the call again to open the session anew`,
    cause === undefined ? undefined : { cause });
}

/**
 * The session refs of the subagents registered under the closing scope's task, and theirs
 * (aliases record each child's parent). A subagent registered with the closing session itself
 * goes with it; one registered under another session belongs to that conversation and is left.
 */
function subagentSessionRefs(store: StateStore, scope: CallScope, ref: string): string[] {
  const out: string[] = [];
  const seen = new Set<string>();
  const queue = [...(scope.task === undefined ? [] : [scope.task]), ...(scope.session === undefined ? [] : store.scopes.tasksOfSession(scope.tenant, scope.profile, scope.session))];
  while (queue.length > 0) {
    const parent = queue.shift() as string;
    if (seen.has(parent)) continue;
    seen.add(parent);
    for (const child of store.scopes.childrenOf(scope.tenant, scope.profile, parent)) {
      const childRef = child.session ?? `@task:${child.child}`;
      if (child.session !== null && child.session !== ref) continue;
      if (childRef !== ref && !out.includes(childRef)) out.push(childRef);
      queue.push(child.child);
    }
  }
  // Deepest last found: close grandchildren before children, children before the parent.
  return out.reverse();
}
