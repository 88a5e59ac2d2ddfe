import { describe, expect, it } from 'vitest';
import type { Broker } from '../../src/broker/broker.js';
import type { EgressEvent } from '../../src/egress/types.js';
import { EGRESS_RULE_LABELS, egressRuleLabel } from '../../src/server/egress-rule-label.js';
import { ServerMetrics } from '../../src/server/metrics.js';
import { parsePrometheusText } from '../helpers/prom-text.js';

/*
 * The egress series of /metrics: one count per decision by allowed/refused and the kind of rule
 * (a fixed set: never a host, an address or an entry), bytes by direction, and the tenant as a
 * label only under server.metrics.perTenant. The broker here is a stand-in holding only what
 * render() reads (config, an empty inventory, no warm pools).
 */

function metrics(perTenant: boolean): ServerMetrics {
  const broker = {
    config: { server: { metrics: { perTenant } } },
    inventory: async () => ({ sandboxes: [], sessions: [] }),
    warmPools: () => [],
    stateBacklog: () => [],
  } as unknown as Broker;
  return new ServerMetrics(broker);
}

function event(tenant: string, over: Partial<EgressEvent>): EgressEvent {
  return {
    timeMs: 0, identity: { tenant, profile: 'bot', sandboxKey: 'session:s' }, host: 'api.example.com', port: 443, channel: 'tls-tunnel',
    allowed: true, rule: 'allow api.example.com', bytesUp: 0, bytesDown: 0, credentials: [], ...over,
  };
}

async function samples(m: ServerMetrics, name: string): Promise<{ labels: Record<string, string>; value: number }[]> {
  const { body } = await m.render({ inflight: 0, mcpSessions: 0 });
  return parsePrometheusText(body).get(name)?.samples ?? [];
}

describe('egress metrics', () => {
  it('counts decisions by allowed/refused and rule kind, and bytes up and down; no host or entry in any label', async () => {
    const m = metrics(false);
    expect(await samples(m, 'berth_egress_bytes_total')).toEqual([
      { name: 'berth_egress_bytes_total', labels: { direction: 'up' }, value: 0 },
      { name: 'berth_egress_bytes_total', labels: { direction: 'down' }, value: 0 },
    ]);
    m.egress(event('a', { bytesUp: 100, bytesDown: 5000 }));
    m.egress(event('a', { rule: 'allow host:db.internal:5432', channel: 'tcp-tunnel', bytesUp: 1, bytesDown: 2 }));
    m.egress(event('b', { host: 'evil.example', allowed: false, rule: 'not in egress.allow', status: 403 }));
    m.egress(event('b', { host: '169.254.169.254', allowed: false, rule: 'always denied: link-local (metadata)', detail: '169.254.169.254' }));
    m.egress(event('b', { host: 'other.example', allowed: false, rule: 'exfiltration', detail: 'a placeholder of GITHUB_TOKEN' }));
    const requests = await samples(m, 'berth_egress_requests_total');
    expect(requests.map((s) => [s.labels, s.value])).toEqual(expect.arrayContaining([
      [{ decision: 'allowed', rule: 'allow' }, 2],
      [{ decision: 'refused', rule: 'not_allowed' }, 1],
      [{ decision: 'refused', rule: 'always_denied' }, 1],
      [{ decision: 'refused', rule: 'exfiltration' }, 1],
    ]));
    expect(requests).toHaveLength(4);
    const bytes = await samples(m, 'berth_egress_bytes_total');
    expect(bytes.map((s) => [s.labels['direction'], s.value])).toEqual([['up', 101], ['down', 5002]]);
    const { body } = await m.render({ inflight: 0, mcpSessions: 0 });
    expect(body).not.toMatch(/evil\.example|169\.254|db\.internal|api\.example\.com|GITHUB_TOKEN/);
  });

  it('the tenant is a label only under server.metrics.perTenant', async () => {
    const plain = metrics(false);
    plain.egress(event('acme', { bytesUp: 1 }));
    expect((await samples(plain, 'berth_egress_requests_total'))[0]!.labels).toEqual({ decision: 'allowed', rule: 'allow' });
    const per = metrics(true);
    per.egress(event('acme', { bytesUp: 7 }));
    per.egress(event('rival', { allowed: false, rule: 'mode none' }));
    expect((await samples(per, 'berth_egress_requests_total')).map((s) => s.labels)).toEqual([
      { decision: 'allowed', rule: 'allow', tenant: 'acme' }, { decision: 'refused', rule: 'mode_none', tenant: 'rival' },
    ]);
    expect(await samples(per, 'berth_egress_bytes_total')).toEqual([{ name: 'berth_egress_bytes_total', labels: { direction: 'up', tenant: 'acme' }, value: 7 }]);
  });

  it('every rule the proxy reports maps to one label of the fixed set; an unknown one is "other"', () => {
    const rules: [string, string][] = [
      ['allow api.github.com', 'allow'], ['allow *.githubusercontent.com', 'allow'], ['allow cidr:10.20.0.0/16', 'allow'],
      ['deny cidr:10.0.0.0/8', 'deny'], ['deny evil.example', 'deny'], ['mode open', 'mode_open'], ['mode none', 'mode_none'],
      ['not in egress.allow', 'not_allowed'], ['always denied: loopback', 'always_denied'], ['exfiltration', 'exfiltration'],
      ['host mismatch', 'host_mismatch'], ['fronting', 'fronting'], ['bad client hello', 'bad_client_hello'], ['lookup failed', 'lookup_failed'],
      ['upstream failed (ECONNREFUSED: connect)', 'upstream_failed'], ['proxy auth', 'proxy_auth'], ['something new', 'other'], ['allowance', 'other'],
    ];
    for (const [rule, label] of rules) expect([rule, egressRuleLabel(rule)]).toEqual([rule, label]);
    expect(new Set(rules.map(([, l]) => l))).toEqual(new Set(EGRESS_RULE_LABELS));
  });
});
