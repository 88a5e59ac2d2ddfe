import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { Broker, BrokerObserver, CallObservation, ReapObservation } from '../broker/broker.js';
import type { EgressEvent } from '../egress/types.js';
import type { ClosedReason, RefusedLimit } from './connection-guard.js';
import { BERTH_VERSION } from '../kit/version.js';
import { egressRuleLabel } from './egress-rule-label.js';

/*
 * `GET /metrics` of one `berth serve`: its own prom-client Registry (never the library's global
 * one: one process may run many servers, as the tests do), fed by the broker's observer
 * interface and, at scrape time, by the broker's inventory. Labels carry backends, states, kinds
 * and error codes only: never a secret, a user, a session or command text. The tenant is a label
 * only when the operator set `server.metrics.perTenant`.
 */

/**
 * Exec latency buckets (seconds): a warm command through a live shell is a fraction of a
 * millisecond (0.2 ms local, about 1 ms over docker or ssh), a cold start seconds.
 */
const EXEC_BUCKETS = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 180];

/** What the server itself reports at each scrape. */
export interface ServerReadings {
  /** Requests the server is answering right now (the scrape included). */
  inflight: number;
  /** Open MCP sessions. */
  mcpSessions: number;
  /** Open HTTP connections (absent: not read, as for metrics rendered without a server). */
  connections?: number;
}

/** What the HTTP app needs of the metrics: count a refusal, answer a scrape. */
export interface MetricsEdge {
  refused(o: { code: string; tenant: string | undefined }): void;
  render(): Promise<{ body: string; contentType: string }>;
}

/**
 * The metrics of one server. Register it on the broker (`broker.observe(metrics)`) before the
 * work it should count (`berth serve` does so before its start-up orphan pass), answer `render()`
 * on `GET /metrics`.
 *
 * @example
 * const metrics = new ServerMetrics(broker);
 * const stop = broker.observe(metrics);
 * const { body, contentType } = await metrics.render({ inflight: 1, mcpSessions: 0 });
 */
export class ServerMetrics implements BrokerObserver {
  readonly registry = new Registry();
  private readonly perTenant: boolean;
  private readonly calls: Counter;
  private readonly failures: Counter;
  private readonly execSeconds: Histogram;
  private readonly timeouts: Counter;
  private readonly refusals: Counter;
  private readonly reaps: Counter;
  private readonly sandboxes: Gauge;
  private readonly sessions: Gauge;
  private readonly inflight: Gauge;
  private readonly mcpSessions: Gauge;
  private readonly poolClaims: Counter;
  private readonly poolReady: Gauge;
  private readonly poolTarget: Gauge;
  private readonly connectionsOpen: Gauge;
  private readonly connectionsClosed: Counter;
  private readonly connectionsRefused: Counter;
  private readonly egressRequests: Counter;
  private readonly egressBytes: Counter;
  private readonly stateUnwritten: Gauge;
  private readonly stateDropped: Counter;
  /** Each log's dropped count as last scraped: the counter goes up by the difference. */
  private readonly droppedSeen = new Map<string, number>();

  constructor(private readonly broker: Broker) {
    this.perTenant = broker.config.server.metrics.perTenant;
    const t = this.perTenant ? ['tenant'] : [];
    const registers = [this.registry];
    this.calls = new Counter({ name: 'berth_calls_total', help: 'Calls that ended (exec, job, upload, read, export, media), by kind and backend', labelNames: ['kind', 'backend', ...t], registers });
    this.failures = new Counter({ name: 'berth_call_failures_total', help: 'Calls that ended in an error instead of a result, by kind, backend and error code', labelNames: ['kind', 'backend', 'code'], registers });
    this.execSeconds = new Histogram({
      name: 'berth_exec_duration_seconds', help: 'Latency of exec calls by backend; cold="true" for a call that brought its sandbox up',
      labelNames: ['backend', 'cold'], buckets: EXEC_BUCKETS, registers,
    });
    this.timeouts = new Counter({ name: 'berth_exec_timeouts_total', help: 'Commands killed at their timeout, by backend', labelNames: ['backend'], registers });
    this.refusals = new Counter({ name: 'berth_refusals_total', help: 'Calls refused by policy, credentials or a limit, by error code', labelNames: ['code', ...t], registers });
    this.reaps = new Counter({ name: 'berth_reaper_removals_total', help: 'Sandboxes the reapers removed (orphan) or removed or stopped (idle), by reason and backend', labelNames: ['reason', 'backend'], registers });
    this.sandboxes = new Gauge({ name: 'berth_sandboxes', help: 'Recorded sandboxes by backend, state and lifecycle (persistent or ephemeral)', labelNames: ['backend', 'state', 'lifecycle', ...t], registers });
    this.sessions = new Gauge({ name: 'berth_sessions_open', help: 'Sessions open in the state', labelNames: t, registers });
    this.inflight = new Gauge({ name: 'berth_server_inflight_calls', help: 'HTTP and MCP requests this server is answering now, this scrape included', registers });
    this.mcpSessions = new Gauge({ name: 'berth_mcp_sessions', help: 'Open MCP sessions on this server', registers });
    this.poolClaims = new Counter({ name: 'berth_warm_pool_claims_total', help: 'New sandboxes a warm pool could serve, by backend and result (hit: from the pool; miss: created the usual way)', labelNames: ['backend', 'result'], registers });
    this.connectionsOpen = new Gauge({ name: 'berth_server_connections_open', help: 'HTTP connections open on this server now', registers });
    this.connectionsClosed = new Counter({
      name: 'berth_server_connections_closed_total', registers, labelNames: ['reason'],
      help: 'Connections the server closed for a bound: no complete request head in time (header_timeout), idle between requests (keep_alive), a request body that stalled (body_stall)',
    });
    this.connectionsRefused = new Counter({
      name: 'berth_server_connections_refused_total', registers, labelNames: ['reason'],
      help: 'Connections closed as they arrived, past server.maxConnections (total) or server.maxConnectionsPerAddress (per_address)',
    });
    // Every series from the start, at 0: a rate over them works before the first closing.
    for (const reason of ['header_timeout', 'keep_alive', 'body_stall'] satisfies ClosedReason[]) this.connectionsClosed.inc({ reason }, 0);
    for (const reason of ['total', 'per_address'] satisfies RefusedLimit[]) this.connectionsRefused.inc({ reason }, 0);
    this.egressRequests = new Counter({
      name: 'berth_egress_requests_total', registers, labelNames: ['decision', 'rule', ...t],
      help: 'Decisions of berth\'s egress proxy (a tunnel, an HTTP request, a refusal), allowed or refused, by the kind of rule that decided',
    });
    this.egressBytes = new Counter({
      name: 'berth_egress_bytes_total', registers, labelNames: ['direction', ...t],
      help: 'Bytes through berth\'s egress proxy, up (from sandboxes) and down (to them): on the wire for tunnels, bodies for HTTP requests',
    });
    if (!this.perTenant) for (const direction of ['up', 'down']) this.egressBytes.inc({ direction }, 0);
    this.stateUnwritten = new Gauge({
      name: 'berth_state_unwritten_entries',
      help: 'Entries of a log (audit, egress_audit) held in memory because state.db refuses their writes (a full disk, a read-only file); 0 while writes succeed',
      labelNames: ['log'], registers,
    });
    this.stateDropped = new Counter({
      name: 'berth_state_dropped_entries_total',
      help: 'Entries of a log (audit, egress_audit) dropped while state.db refused writes, past the ~16 MiB a log keeps in memory',
      labelNames: ['log'], registers,
    });
    for (const log of ['audit', 'egress_audit']) this.stateDropped.inc({ log }, 0);
    this.poolReady = new Gauge({ name: 'berth_warm_pool_ready', help: "Sandboxes this server's warm pools hold ready now, by backend", labelNames: ['backend'], registers });
    this.poolTarget = new Gauge({ name: 'berth_warm_pool_target', help: "The number of ready sandboxes this server's warm pools are kept at, by backend", labelNames: ['backend'], registers });
    new Gauge({ name: 'berth_build_info', help: 'Always 1; the berth version this server runs, as a label', labelNames: ['version'], registers }).set({ version: BERTH_VERSION }, 1);
    // The process's CPU, memory, open files, event-loop lag, heap and GC (process_*, nodejs_*).
    collectDefaultMetrics({ register: this.registry });
    // Gauges named like counters (promtool rejects them); the by-type gauges without "_total" add up to the same.
    for (const name of ['nodejs_active_handles_total', 'nodejs_active_requests_total', 'nodejs_active_resources_total']) this.registry.removeSingleMetric(name);
  }

  poolClaimed(o: { backend: string; hit: boolean }): void {
    this.poolClaims.inc({ backend: o.backend, result: o.hit ? 'hit' : 'miss' });
  }

  callEnded(o: CallObservation): void {
    this.calls.inc(this.withTenant({ kind: o.kind, backend: o.backend }, o.tenant));
    if (o.errorCode !== undefined) this.failures.inc({ kind: o.kind, backend: o.backend, code: o.errorCode });
    if (o.kind !== 'exec') return;
    if (o.timedOut) this.timeouts.inc({ backend: o.backend });
    this.execSeconds.observe({ backend: o.backend, cold: String(o.cold) }, o.durationMs / 1000);
  }

  egress(e: EgressEvent): void {
    const tenant = e.identity.tenant;
    this.egressRequests.inc(this.withTenant({ decision: e.allowed ? 'allowed' : 'refused', rule: egressRuleLabel(e.rule) }, tenant));
    if (e.bytesUp > 0) this.egressBytes.inc(this.withTenant({ direction: 'up' }, tenant), e.bytesUp);
    if (e.bytesDown > 0) this.egressBytes.inc(this.withTenant({ direction: 'down' }, tenant), e.bytesDown);
  }

  connectionClosed(reason: ClosedReason): void {
    this.connectionsClosed.inc({ reason });
  }

  connectionRefused(limit: RefusedLimit): void {
    this.connectionsRefused.inc({ reason: limit });
  }

  refused(o: { code: string; tenant: string | undefined }): void {
    this.refusals.inc(this.withTenant({ code: o.code }, o.tenant ?? ''));
  }

  reaped(o: ReapObservation): void {
    this.reaps.inc({ reason: o.reason, backend: o.backend ?? 'unknown' });
  }

  /** The exposition text: counters as they stand, gauges read now (the engines are asked for sandbox states). */
  async render(now: ServerReadings): Promise<{ body: string; contentType: string }> {
    const inv = await this.broker.inventory();
    this.sandboxes.reset();
    for (const s of inv.sandboxes) {
      this.sandboxes.inc(this.withTenant({ backend: s.backend, state: s.state, lifecycle: s.persistent ? 'persistent' : 'ephemeral' }, s.tenant));
    }
    this.sessions.reset();
    if (!this.perTenant) this.sessions.set(inv.sessions.filter((s) => s.open).length);
    else for (const s of inv.sessions) if (s.open) this.sessions.inc({ tenant: s.tenant });
    this.poolReady.reset();
    this.poolTarget.reset();
    for (const p of this.broker.warmPools()) {
      this.poolReady.inc({ backend: p.backend }, p.ready);
      this.poolTarget.inc({ backend: p.backend }, p.size);
    }
    for (const b of this.broker.stateBacklog()) {
      this.stateUnwritten.set({ log: b.log }, b.unwritten);
      const more = b.dropped - (this.droppedSeen.get(b.log) ?? 0);
      if (more > 0) this.stateDropped.inc({ log: b.log }, more);
      this.droppedSeen.set(b.log, b.dropped);
    }
    this.inflight.set(now.inflight);
    this.mcpSessions.set(now.mcpSessions);
    if (now.connections !== undefined) this.connectionsOpen.set(now.connections);
    return { body: await this.registry.metrics(), contentType: this.registry.contentType };
  }

  private withTenant<L extends Record<string, string>>(labels: L, tenant: string): L {
    return this.perTenant ? { ...labels, tenant } : labels;
  }
}
