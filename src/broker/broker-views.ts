import type { Inventory, Overview, SandboxInfo, StoreOverview } from './broker-types.js';
import type { SandboxMeasures, SandboxState } from './sandbox-measures.js';
import type { SessionLinks } from './session-links.js';
import type { AuditTable } from './state/audit-table.js';
import type { JobTable } from './state/job-table.js';
import type { SandboxRecord, SandboxTable, TenantQuota } from './state/sandbox-table.js';
import type { SessionTable } from './state/session-table.js';

export interface BrokerViewsOptions {
  sandboxes: Pick<SandboxTable, 'list' | 'tenantUsage'>;
  sessions: Pick<SessionTable, 'list' | 'ofSandbox'>;
  audit: Pick<AuditTable, 'recent'>;
  jobs: Pick<JobTable, 'recent'>;
  links: Pick<SessionLinks, 'isLive'>;
  measures: Pick<SandboxMeasures, 'stateReader' | 'usage'>;
  /** What one tenant's sandboxes may add up to. */
  quota: TenantQuota;
}

/**
 * What the broker shows of its sandboxes and sessions, read-only: a tenant's list, the operator's
 * overview and inventory, the open sessions' counts. From the store, and from the engines where a
 * view asks what a sandbox is or uses now.
 */
export class BrokerViews {
  constructor(private readonly opts: BrokerViewsOptions) {}

  /** Sandboxes of a tenant (of every tenant when undefined: the operator's view) as the store knows them (no engine contacted). */
  list(tenant: string | undefined): SandboxInfo[] {
    return this.infoOf(this.opts.sandboxes.list(tenant));
  }

  /** `list` plus each sandbox's state (see `SandboxMeasures.stateReader`). */
  async listWithState(tenant: string): Promise<Array<SandboxInfo & { state: SandboxState }>> {
    const records = this.opts.sandboxes.list(tenant);
    const stateOf = await this.opts.measures.stateReader(records);
    return this.infoOf(records).map((info) => {
      const rec = records.find((r) => r.key === info.sandboxKey && r.profile === info.profile);
      return { ...info, state: rec === undefined ? 'unknown' : stateOf(rec) };
    });
  }

  /**
   * Every tenant's sandboxes with their state and what they use now, and the latest calls of every
   * tenant (`berth top`); with `tenant`, that tenant's sandboxes only and no calls.
   */
  async overview(opts: { recentCalls: number; tenant?: string }): Promise<Overview> {
    const { sandboxes, audit, measures, quota } = this.opts;
    const records = sandboxes.list(opts.tenant);
    const [stateOf, usage] = await Promise.all([measures.stateReader(records), measures.usage(records)]);
    const infos = this.infoOf(records);
    return {
      sandboxes: records.map((r, i) => ({ ...(infos[i] as SandboxInfo), state: stateOf(r), usage: usage.get(r.digest) })),
      tenants: [...sandboxes.tenantUsage(opts.tenant)].map(([tenant, used]) => ({ tenant, usage: used, quota })),
      recentCalls: opts.tenant === undefined ? audit.recent(opts.recentCalls) : [],
    };
  }

  /** Every tenant's sandboxes, limits, latest calls and latest jobs as the store knows them: at once, whatever the engines do. */
  storeOverview(opts: { recentCalls: number; recentJobs: number }): StoreOverview {
    const { sandboxes, audit, jobs, quota } = this.opts;
    return {
      sandboxes: this.infoOf(sandboxes.list()),
      tenants: [...sandboxes.tenantUsage()].map(([tenant, used]) => ({ tenant, usage: used, quota })),
      recentCalls: audit.recent(opts.recentCalls),
      recentJobs: jobs.recent(opts.recentJobs),
    };
  }

  /** How many sessions are open now, by tenant and profile; from the state alone. */
  openSessionCounts(): Array<{ tenant: string; profile: string; open: number }> {
    const { sessions, links } = this.opts;
    const counts = new Map<string, { tenant: string; profile: string; open: number }>();
    for (const s of sessions.list()) {
      if (!links.isLive(s, s)) continue;
      const key = JSON.stringify([s.tenant, s.profile]);
      const c = counts.get(key) ?? { tenant: s.tenant, profile: s.profile, open: 0 };
      c.open++;
      counts.set(key, c);
    }
    return [...counts.values()];
  }

  /** Every sandbox and session of this installation, of all tenants (the operator's metrics). */
  async inventory(): Promise<Inventory> {
    const { sandboxes, sessions, links, measures } = this.opts;
    const records = sandboxes.list();
    const stateOf = await measures.stateReader(records);
    return {
      sandboxes: records.map((r) => ({ tenant: r.tenant, backend: r.backend, persistent: !r.ephemeral, state: stateOf(r) })),
      // Open and live: a session whose holder died is open in the store until the reaper's next pass.
      sessions: sessions.list().map((s) => ({ tenant: s.tenant, open: links.isLive(s, s) })),
    };
  }

  private infoOf(records: readonly SandboxRecord[]): SandboxInfo[] {
    const { sessions, links } = this.opts;
    return records.map((r) => ({
      sandboxKey: r.key, tenant: r.tenant, profile: r.profile, backend: r.backend, rule: r.rule, persistent: !r.ephemeral,
      name: r.name, mount: r.mount, createdMs: r.createdMs, lastUsedMs: r.lastUsedMs,
      ...((r.hibernatedMs ?? null) === null ? {} : { hibernatedMs: r.hibernatedMs as number }),
      sessions: sessions.ofSandbox(r.digest).map((s) => ({ session: s.session, open: links.isLive(s, r) })),
    }));
  }
}
