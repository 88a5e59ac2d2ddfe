import { removeSessionStaging } from '../files/staging.js';
import type { CallScope } from '../scope/call-scope.js';
import type { AuditRecord } from './audit.js';
import type { LiveSandboxes } from './live-sandboxes.js';
import { sessionRefOf } from './resolve-call.js';
import { sessionKey, type SessionCalls } from './session-calls.js';
import type { SandboxRecord, SandboxTable } from './state/sandbox-table.js';
import type { ScopeRecords } from './state/scope-records.js';
import type { SessionTable } from './state/session-table.js';
import type { Logger } from '../logging/logger.js';

export interface CloseResult {
  /** Keys of the ephemeral sandboxes this close removed. */
  removed: string[];
  /** Keys of the sandboxes kept (persistent, or still used by another open session). */
  kept: string[];
  /** Whether the session (or a subagent of it) was open: false when there was nothing to close. */
  wasOpen: boolean;
}

/** What a close asks of the removal part: a sandbox goes with its record. */
export interface SandboxRemover {
  remove(rec: SandboxRecord): Promise<void>;
}

/** What a close asks of the session links: whether another open session still uses a sandbox. */
export interface SessionLiveness {
  hasLiveSession(rec: SandboxRecord): boolean;
}

export interface SessionCloserOptions {
  calls: Pick<SessionCalls, 'overtake'>;
  lives: Pick<LiveSandboxes, 'all'>;
  removal: SandboxRemover;
  links: SessionLiveness;
  sessions: Pick<SessionTable, 'close' | 'list' | 'releaseHeldBy'>;
  sandboxes: Pick<SandboxTable, 'get'>;
  scopes: Pick<ScopeRecords, 'childrenOf' | 'tasksOfSession'>;
  audit: { record(r: AuditRecord): void };
  berthHome: string;
  /** This process's token when it holds the sessions it opens (closed with it); null when it does not. */
  owner: string | null;
  log: Logger;
}

/**
 * The close of a session: its calls under way are overtaken, its shells, cwd records, aliases,
 * overrides and staged exports go, and the ephemeral sandboxes no other open session uses are
 * removed. At shutdown, the sessions this process holds are closed the same way.
 */
export class SessionCloser {
  constructor(private readonly opts: SessionCloserOptions) {}

  /**
   * Closes a session: its shells, cwd records, aliases and overrides; removes ephemeral sandboxes no
   * other open session uses. The subagents registered under the session's task (and theirs) belong
   * to its conversation: they are closed first, so they stop holding the sandbox they share.
   */
  async close(s: CallScope): Promise<CloseResult> {
    const ref = sessionRefOf(s);
    const results: CloseResult[] = [];
    for (const child of subagentSessionRefs(this.opts.scopes, s, ref)) {
      results.push(await this.closeRef(s.tenant, s.profile, child, s));
    }
    results.push(await this.closeRef(s.tenant, s.profile, ref, s));
    const removed = [...new Set(results.flatMap((r) => r.removed))];
    const kept = [...new Set(results.flatMap((r) => r.kept))].filter((k) => !removed.includes(k));
    return { removed, kept, wasOpen: results.some((r) => r.wasOpen) };
  }

  /** Closes one session by its ref (`sessionRefOf`); `scope` names the user for the audit entry. */
  async closeRef(tenant: string, profile: string, sessionRef: string, scope?: CallScope): Promise<CloseResult> {
    const { calls, lives, removal, links, sessions, sandboxes, berthHome } = this.opts;
    const started = Date.now();
    const id = sessionKey(tenant, profile, sessionRef);
    // The session's calls under way may not outlive the close with a sandbox of their own: from now
    // on none creates, recreates or reopens anything, and those still getting their sandbox are
    // waited for, so what they create is linked to the session by then and removed below.
    const overtaken = calls.overtake(id);
    await Promise.all(overtaken.map((c) => c.ensuring?.catch(() => undefined)));
    for (const live of lives.all()) {
      live.sessions.delete(id);
      await live.shells.closeSession(tenant, profile, sessionRef);
    }
    const { wasOpen, digests } = sessions.close(tenant, profile, sessionRef, Date.now());
    await removeSessionStaging(berthHome, { tenant, profile, sessionRef }).catch((e) => this.opts.log.child('berth:files').warn(`remove staging of ${sessionRef}: ${String(e)}`));
    const result: CloseResult = { removed: [], kept: [], wasOpen };
    for (const digest of digests) {
      const rec = sandboxes.get(digest);
      if (rec === undefined) continue;
      if (rec.ephemeral && !links.hasLiveSession(rec)) {
        await removal.remove(rec);
        result.removed.push(rec.key);
      } else {
        result.kept.push(rec.key);
      }
    }
    this.opts.audit.record({ kind: 'close', tenant, profile, user: scope?.user ?? null, sessionRef, startedMs: started, token: scope?.token });
    return result;
  }

  /** At shutdown: closes the sessions this process holds and lets go of them. */
  async closeHeld(): Promise<void> {
    const { sessions, owner } = this.opts;
    if (owner === null) return;
    for (const s of sessions.list()) {
      if (s.owner === owner && s.closedMs === null) {
        await this.closeRef(s.tenant, s.profile, s.session).catch((e) => this.opts.log.child('berth:broker').warn(`close ${s.session}: ${String(e)}`));
      }
    }
    sessions.releaseHeldBy(owner);
  }
}

/**
 * The session refs of the subagents registered under the closing scope's task, and theirs
 * (aliases record each child's parent). A subagent registered with the closing session itself
 * goes with it; one registered under another session belongs to that conversation and is left.
 */
function subagentSessionRefs(scopes: Pick<ScopeRecords, 'childrenOf' | 'tasksOfSession'>, scope: CallScope, ref: string): string[] {
  const out: string[] = [];
  const seen = new Set<string>();
  const queue = [...(scope.task === undefined ? [] : [scope.task]), ...(scope.session === undefined ? [] : scopes.tasksOfSession(scope.tenant, scope.profile, scope.session))];
  while (queue.length > 0) {
    const parent = queue.shift() as string;
    if (seen.has(parent)) continue;
    seen.add(parent);
    for (const child of scopes.childrenOf(scope.tenant, scope.profile, parent)) {
      const childRef = child.session ?? `@task:${child.child}`;
      if (child.session !== null && child.session !== ref) continue;
      if (childRef !== ref && !out.includes(childRef)) out.push(childRef);
      queue.push(child.child);
    }
  }
  // Deepest last found: close grandchildren before children, children before the parent.
  return out.reverse();
}
