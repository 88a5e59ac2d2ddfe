import type { Broker, EgressAuditEntry } from '../broker/broker.js';
import type { TenantJob } from '../broker/job-runner.js';
import type { AuditEntry } from '../broker/state/audit-table.js';
import type { SandboxUsage } from '../broker/sandbox-usage.js';
import type { Caller } from './caller.js';
import type { CallHistory, HistoryPoint } from './call-history.js';
import { remoteSandbox, type RemoteSandbox } from './remote-view.js';
import type { SandboxInfo } from '../broker/broker.js';
import type { SandboxState } from '../broker/sandbox-measures.js';
import type { UsageSamples } from './usage-samples.js';

/** Calls and jobs one update carries (the newest). */
const RECENT_CALLS = 50;
const RECENT_JOBS = 50;
/** Egress decisions one update carries (the newest). */
const RECENT_EGRESS = 50;

/** What a sandbox uses now, as the dashboard shows it; a field the backend cannot measure is null. */
export interface UsageView {
  /** Percent of one core since an earlier read of the sandbox (by any stream of this server); null before a second sample or where the backend cannot tell. */
  cpuPercent: number | null;
  /** True while CPU waits for its second sample (the next update, about a second later, has it). */
  cpuPending: boolean;
  memoryBytes: number;
  memoryLimitBytes: number | null;
  diskBytes: number | null;
  processes: number | null;
}

/** One update of `GET /v1/overview/stream`: the caller's tenant, of the token's profiles only. */
export interface OverviewView {
  tenant: string;
  timeMs: number;
  sandboxes: Array<RemoteSandbox<SandboxInfo & { state: SandboxState }> & { usage: UsageView | null }>;
  jobs: TenantJob[];
  calls: AuditEntry[];
  /** The latest decisions of berth's egress proxy for these sandboxes (host, rule, allowed or refused; never a value). */
  egress: EgressAuditEntry[];
  history: HistoryPoint[];
}

/**
 * Builds the caller's view: its tenant's sandboxes of its profiles (and shared ones, which belong
 * to no profile, as `/v1/sandboxes` lists them) with what each uses, its jobs, calls and egress
 * decisions of those profiles, and the last hour of its profiles. Each sandbox's sample goes into
 * `samples` (shared by the server's streams), which gives its CPU rate.
 */
export async function overviewView(
  broker: Broker, history: CallHistory, caller: Caller, samples: UsageSamples,
): Promise<OverviewView> {
  const { tenant, profiles } = caller;
  const [overview, jobs] = await Promise.all([
    broker.overview({ recentCalls: 0, tenant }),
    broker.jobs.ofTenant(tenant, profiles, RECENT_JOBS),
  ]);
  const sandboxes = overview.sandboxes
    .filter((s) => s.tenant === tenant && (s.profile === null || profiles.includes(s.profile)))
    .map(({ usage, tenant: _t, ...s }) => {
      const cpu = usage === undefined ? undefined : samples.cpu(JSON.stringify([tenant, s.profile, s.sandboxKey]), usage);
      return { ...remoteSandbox({ ...s, tenant }), usage: usage === undefined ? null : usageView(cpu, usage) };
    });
  samples.prune(Date.now());
  return {
    tenant, timeMs: Date.now(), sandboxes, jobs,
    calls: broker.audit({ tenant, profiles, limit: RECENT_CALLS }),
    egress: broker.egressAudit({ tenant, profiles, limit: RECENT_EGRESS }),
    history: history.lastHour(tenant, profiles),
  };
}

function usageView(cpu: number | undefined, u: SandboxUsage): UsageView {
  return {
    cpuPercent: cpu ?? null,
    cpuPending: cpu === undefined,
    memoryBytes: u.memoryBytes,
    memoryLimitBytes: u.memoryLimitBytes ?? null,
    diskBytes: u.diskBytes ?? null,
    processes: u.processes ?? null,
  };
}
