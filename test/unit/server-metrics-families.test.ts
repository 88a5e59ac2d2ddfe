import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { Broker } from '../../src/broker/broker.js';
import { ServerMetrics } from '../../src/server/metrics.js';
import { REPO } from '../helpers/cli.js';
import { parsePrometheusText, sampleValue } from '../helpers/prom-text.js';

/*
 * What /metrics says about berth itself: exec buckets fine enough for a warm command (a fraction
 * of a millisecond), the process's own metrics, the version, one quantity per series, and the
 * whole body accepted by Prometheus's own linter (promtool, from Debian's prometheus package).
 * The broker is a stand-in holding only what render() reads.
 */

/** What the state's logs hold back (`Broker.stateBacklog`), as the stand-in answers it now. */
let backlog = [{ log: 'audit', unwritten: 0, dropped: 0 }, { log: 'egress_audit', unwritten: 0, dropped: 0 }];

function metrics(): ServerMetrics {
  const broker = {
    config: { server: { metrics: { perTenant: false } } },
    inventory: async () => ({ sandboxes: [{ backend: 'docker', state: 'active', persistent: false, tenant: 'acme' }], sessions: [{ open: true, tenant: 'acme' }] }),
    warmPools: () => [{ backend: 'docker', ready: 2, size: 3 }],
    stateBacklog: () => backlog,
  } as unknown as Broker;
  const m = new ServerMetrics(broker);
  m.callEnded({ kind: 'exec', tenant: 'acme', profile: 'default', backend: 'docker', durationMs: 0.3, cold: false, timedOut: false, errorCode: undefined });
  m.callEnded({ kind: 'exec', tenant: 'acme', profile: 'default', backend: 'docker', durationMs: 1_800, cold: true, timedOut: false, errorCode: undefined });
  m.reaped({ reason: 'idle', tenant: 'acme', backend: 'docker' });
  m.refused({ code: 'unauthorized', tenant: undefined });
  return m;
}

const promtool = spawnSync('promtool', ['--version']).error === undefined ? 'promtool' : undefined;

describe('/metrics families', () => {
  it('exec buckets resolve a warm 0.3 ms command: it falls between 0.25 ms and 0.5 ms', async () => {
    const families = parsePrometheusText((await metrics().render({ inflight: 1, mcpSessions: 0 })).body);
    const warm = { backend: 'docker', cold: 'false' };
    expect(sampleValue(families, 'berth_exec_duration_seconds_bucket', { ...warm, le: '0.0001' })).toBe(0);
    expect(sampleValue(families, 'berth_exec_duration_seconds_bucket', { ...warm, le: '0.00025' })).toBe(0);
    expect(sampleValue(families, 'berth_exec_duration_seconds_bucket', { ...warm, le: '0.0005' })).toBe(1);
  });

  it('has the process and runtime metrics and berth_build_info with the package version', async () => {
    const families = parsePrometheusText((await metrics().render({ inflight: 1, mcpSessions: 0 })).body);
    for (const name of ['process_cpu_user_seconds_total', 'process_resident_memory_bytes', 'process_open_fds', 'nodejs_eventloop_lag_seconds', 'nodejs_heap_size_used_bytes']) {
      expect(families.has(name), name).toBe(true);
    }
    const { version } = JSON.parse(readFileSync(join(REPO, 'package.json'), 'utf8')) as { version: string };
    expect(families.get('berth_build_info')?.samples).toEqual([{ name: 'berth_build_info', labels: { version }, value: 1 }]);
  });

  it('the warm pool reads as two series, ready and target, each one quantity by backend', async () => {
    const families = parsePrometheusText((await metrics().render({ inflight: 1, mcpSessions: 0 })).body);
    expect(families.get('berth_warm_pool_ready')?.samples).toEqual([{ name: 'berth_warm_pool_ready', labels: { backend: 'docker' }, value: 2 }]);
    expect(families.get('berth_warm_pool_target')?.samples).toEqual([{ name: 'berth_warm_pool_target', labels: { backend: 'docker' }, value: 3 }]);
  });

  it('the audit logs held back while state.db refuses writes: a gauge of what waits, a counter of what was dropped, by log', async () => {
    const m = metrics();
    const read = async () => parsePrometheusText((await m.render({ inflight: 1, mcpSessions: 0 })).body);
    let families = await read();
    // Both logs are there from the start, at 0: an alert on them never reads a missing series as fine.
    for (const log of ['audit', 'egress_audit']) {
      expect(sampleValue(families, 'berth_state_unwritten_entries', { log })).toBe(0);
      expect(sampleValue(families, 'berth_state_dropped_entries_total', { log })).toBe(0);
    }
    backlog = [{ log: 'audit', unwritten: 120, dropped: 7 }, { log: 'egress_audit', unwritten: 0, dropped: 0 }];
    families = await read();
    expect(sampleValue(families, 'berth_state_unwritten_entries', { log: 'audit' })).toBe(120);
    expect(sampleValue(families, 'berth_state_dropped_entries_total', { log: 'audit' })).toBe(7);
    // The store's count is a running total: the counter follows it, not adding it twice.
    backlog = [{ log: 'audit', unwritten: 0, dropped: 9 }, { log: 'egress_audit', unwritten: 0, dropped: 0 }];
    families = await read();
    expect(sampleValue(families, 'berth_state_unwritten_entries', { log: 'audit' })).toBe(0);
    expect(sampleValue(families, 'berth_state_dropped_entries_total', { log: 'audit' })).toBe(9);
    backlog = [{ log: 'audit', unwritten: 0, dropped: 0 }, { log: 'egress_audit', unwritten: 0, dropped: 0 }];
  });

  it('promtool check metrics accepts the whole body', async (ctx) => {
    if (promtool === undefined) {
      if (process.env['BERTH_REQUIRE_PROMTOOL'] === '1') throw new Error('BERTH_REQUIRE_PROMTOOL=1 but promtool is not installed (apt-get install prometheus)');
      console.warn('skipping the promtool check: promtool is not installed (apt-get install prometheus)');
      ctx.skip();
    }
    const { body } = await metrics().render({ inflight: 1, mcpSessions: 2, connections: 3 });
    const r = spawnSync(promtool!, ['check', 'metrics'], { input: body, encoding: 'utf8' });
    expect({ status: r.status, out: `${r.stdout}${r.stderr}` }).toEqual({ status: 0, out: '' });
  });
});
