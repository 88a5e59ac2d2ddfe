import { redactText } from '../kit/redaction.js';
import type { CallScope, CallToken } from '../scope/call-scope.js';
import type { BrokerObserver, CallKind } from './observer.js';
import type { ResolvedCall } from './resolve-call.js';
import type { EgressEvent } from '../egress/types.js';
import { egressAuditEntry } from './egress-audit.js';
import type { AuditEntry, AuditTable } from './state/audit-table.js';
import type { EgressAuditEntry, EgressAuditFilter, EgressTable } from './state/egress-table.js';

const DAY_MS = 24 * 60 * 60 * 1000;

/** What the audit log records: a call on a sandbox, a session's close, or a snapshot action. */
export type AuditRecord =
  | {
    kind: CallKind;
    call: ResolvedCall;
    /** The command or file-call text as the caller gave it: redacted here with the call's secrets. */
    command: string;
    exitCode: number | null;
    startedMs: number;
    /** What the observers are told besides (never written to the log). */
    outcome?: CallOutcome;
  }
  | { kind: 'close'; tenant: string; profile: string; user: string | null; sessionRef: string; startedMs: number; token: CallToken | undefined }
  /** A snapshot, restore or fork of the call's sandbox (`action`: `snapshot create NAME`, ...); `errorCode` when it failed. */
  | { kind: 'snapshot'; call: ResolvedCall; action: string; startedMs: number; errorCode: string | undefined }
  /** A kill of a background job by a call of its session: the job, its sandbox (when found) and what came of it. */
  | { kind: 'kill'; scope: CallScope; jobId: string; sandboxKey: string | null; outcome: JobKillOutcome; startedMs: number };

/** What a job kill did: ended the job, found it ended already, or failed with an error code. */
export type JobKillOutcome = { killed: boolean } | { errorCode: string };

/** The audit's token columns of a call's token (none for a local call). */
function tokenOf(token: CallToken | undefined): { tokenId: string | null; tokenName: string | null } {
  return { tokenId: token?.id ?? null, tokenName: token?.name ?? null };
}

/** How a call went, for the observers: its sandbox came up for it, it timed out, it failed. */
export interface CallOutcome {
  cold?: boolean;
  timedOut?: boolean;
  errorCode?: string;
}

export type AuditFilter = { tenant: string; profiles?: readonly string[]; user?: string; session?: string; limit?: number };

/**
 * The audit log of one broker: every call and every close, written through one `record`, and
 * `audit.retentionDays` applied by `prune`. Every call recorded is also told to the broker's
 * observers (without its command, session or user).
 *
 * @example
 * audit.record({ kind: 'exec', call, command: 'ls', exitCode: 0, startedMs });
 */
export class AuditRecorder {
  constructor(
    private readonly entries: Pick<AuditTable, 'add' | 'list' | 'prune'>,
    private readonly opts: {
      retentionDays: number; log: (message: string) => void; observer: Pick<BrokerObserver, 'callEnded'>;
      /** Where the egress proxy's decisions go (absent: not kept, as in tests of the call audit alone). */
      egress?: Pick<EgressTable, 'add' | 'list' | 'prune'>;
    },
  ) {}

  record(r: AuditRecord): void {
    const durationMs = Date.now() - r.startedMs;
    if (r.kind === 'close') {
      this.entries.add({
        timeMs: r.startedMs, tenant: r.tenant, profile: r.profile, user: r.user, session: r.sessionRef, sandboxKey: null,
        kind: 'close', command: null, exitCode: null, durationMs, ...tokenOf(r.token),
      });
      return;
    }
    if (r.kind === 'kill') {
      const { scope } = r;
      const outcome = 'errorCode' in r.outcome ? `failed: ${r.outcome.errorCode}` : r.outcome.killed ? 'killed' : 'had already ended';
      this.entries.add({
        timeMs: r.startedMs, tenant: scope.tenant, profile: scope.profile, user: scope.user ?? null, session: scope.session ?? null,
        sandboxKey: r.sandboxKey, kind: 'kill', command: `job ${r.jobId} (${outcome})`, exitCode: null, durationMs, ...tokenOf(scope.token),
      });
      return;
    }
    if (r.kind === 'snapshot') {
      const { scope, binding } = r.call;
      this.entries.add({
        timeMs: r.startedMs, tenant: scope.tenant, profile: scope.profile, user: scope.user ?? null, session: scope.session ?? null,
        sandboxKey: binding.sandboxKey, kind: 'snapshot', command: r.errorCode === undefined ? r.action : `${r.action} (failed: ${r.errorCode})`,
        exitCode: r.errorCode === undefined ? 0 : null, durationMs, ...tokenOf(scope.token),
      });
      return;
    }
    const { scope, binding, redactValues } = r.call;
    this.entries.add({
      timeMs: r.startedMs, tenant: scope.tenant, profile: scope.profile, user: scope.user ?? null,
      session: scope.session ?? null, sandboxKey: binding.sandboxKey, kind: r.kind,
      command: redactText(r.command, redactValues), exitCode: r.exitCode, durationMs, ...tokenOf(scope.token),
    });
    this.opts.observer.callEnded({
      kind: r.kind, tenant: scope.tenant, profile: scope.profile, backend: binding.backend, durationMs,
      cold: r.outcome?.cold ?? false, timedOut: r.outcome?.timedOut ?? false, errorCode: r.outcome?.errorCode,
    });
  }

  /** Entries of one tenant (of the given profiles only, when `profiles` is set), newest first. */
  list(filter: AuditFilter): AuditEntry[] {
    return this.entries.list(filter);
  }

  /** One decision of the egress proxy (see `egressAuditEntry`: never a value or placeholder). */
  recordEgress(e: EgressEvent): void {
    this.opts.egress?.add(egressAuditEntry(e));
  }

  /** Egress decisions of one tenant (of the given profiles only, when `profiles` is set), newest first. */
  listEgress(filter: EgressAuditFilter): EgressAuditEntry[] {
    return this.opts.egress?.list(filter) ?? [];
  }

  /** `audit.retentionDays`: entries and egress decisions older than that go (at open and on every sweep). */
  prune(): void {
    const before = Date.now() - this.opts.retentionDays * DAY_MS;
    try {
      this.entries.prune(before);
      this.opts.egress?.prune(before);
    } catch (e) {
      this.opts.log(`pruning old audit entries failed: ${String(e)}`);
    }
  }
}
