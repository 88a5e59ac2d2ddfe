import { expect, it } from 'vitest';
import { runBerth } from '../helpers/cli.js';
import { describeDocker, dockerConfigYaml, dockerSuiteHooks, installs, type TestInstall } from '../helpers/docker-e2e.js';
import { parsePrometheusText, sampleValue, type Family } from '../helpers/prom-text.js';
import { createToken, ServeProcess, stopAll } from '../helpers/serve.js';

/*
 * GET /metrics on a real `berth serve` over the real engine: only a metrics token reads it, the
 * counters move with real calls (cold and warm execs, a timeout, refusals, an orphan reaped after
 * a crash), the body parses as strict Prometheus text, and no session, user, command text or
 * tenant appears in it unless the operator asked for per-tenant labels.
 */

const reg = installs('berth-metrics-');

async function metricsToken(t: TestInstall): Promise<string> {
  const r = await runBerth(['token', 'create', '--metrics'], { env: t.env, cwd: t.dir });
  expect(r.code, r.stderr).toBe(0);
  expect(r.stderr).toMatch(/metrics token tok_[0-9a-f]{12} created/);
  return r.stdout.trim();
}

async function scrape(server: ServeProcess, token: string): Promise<{ text: string; families: Map<string, Family> }> {
  const res = await fetch(`${server.url}/metrics`, { headers: { authorization: `Bearer ${token}` } });
  const text = await res.text();
  expect(res.status, text).toBe(200);
  expect(res.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
  return { text, families: parsePrometheusText(text) };
}

describeDocker('GET /metrics on berth serve (docker)', () => {
  dockerSuiteHooks(reg, stopAll);

  it('a metrics token reads it, a tenant token is 403 and reads nothing; the counters follow real calls; no ids or commands in the body', async () => {
    const t = reg.track();
    t.writeConfig(dockerConfigYaml({ persistent: false }));
    const tenantToken = await createToken(t, 'acme');
    const mToken = await metricsToken(t);
    const mixed = await runBerth(['token', 'create', '--metrics', '--tenant', 'acme'], { env: t.env, cwd: t.dir });
    expect([mixed.code, mixed.stderr.trim()]).toEqual([2, 'berth: a metrics token has no tenant or profiles: use either --metrics or --tenant T [--profile P ...]']);
    const listed = await runBerth(['token', 'list', '--json'], { env: t.env, cwd: t.dir });
    expect((JSON.parse(listed.stdout) as { metrics?: true; tenant?: string }[]).map((e) => e.metrics ?? e.tenant)).toEqual(['acme', true]);
    const server = await ServeProcess.start(t);
    const api = server.client(tenantToken);

    // Who may read it.
    const anon = await fetch(`${server.url}/metrics`);
    expect(anon.status).toBe(401);
    const asTenant = await api.get('/metrics');
    expect(asTenant.status).toBe(403);
    expect(asTenant.body.error.code).toBe('policy_refused');
    expect(asTenant.body.error.message).toContain('berth token create --metrics');
    expect(String(JSON.stringify(asTenant.body))).not.toContain('berth_');
    const metricsAsTenant = await server.client(mToken).get('/v1/whoami');
    expect(metricsAsTenant.status).toBe(403);
    expect(metricsAsTenant.body.error.message).toContain('metrics token');
    expect((await server.client(mToken).post('/v1/exec', { command: 'true' })).status).toBe(403);

    const session = 'sess-7f3a91';
    const user = 'tg:998877';
    const cold = await api.post('/v1/exec', { session, user, command: 'echo cmd-marker-one' });
    expect(cold.status, JSON.stringify(cold.body)).toBe(200);
    const warm = await api.post('/v1/exec', { session, user, command: 'echo cmd-marker-two' });
    expect(warm.body.stdout).toBe('cmd-marker-two\n');
    const slow = await api.post('/v1/exec', { session, user, command: 'sleep 30 # cmd-marker-three', timeoutSeconds: 1 });
    expect(slow.body.timedOut).toBe(true);
    const forbidden = await api.post('/v1/exec', { session, profile: 'other', command: 'echo cmd-marker-four' });
    expect(forbidden.status).toBe(403);

    const { text, families } = await scrape(server, mToken);
    expect(sampleValue(families, 'berth_calls_total', { kind: 'exec', backend: 'docker' })).toBe(3);
    expect(sampleValue(families, 'berth_exec_duration_seconds_count', { backend: 'docker', cold: 'true' })).toBe(1);
    expect(sampleValue(families, 'berth_exec_duration_seconds_count', { backend: 'docker', cold: 'false' })).toBe(2);
    expect(sampleValue(families, 'berth_exec_duration_seconds_bucket', { backend: 'docker', cold: 'false', le: '+Inf' })).toBe(2);
    expect(sampleValue(families, 'berth_exec_timeouts_total', { backend: 'docker' })).toBe(1);
    expect(sampleValue(families, 'berth_refusals_total', { code: 'profile_forbidden' })).toBe(1);
    expect(sampleValue(families, 'berth_refusals_total', { code: 'policy_refused' })).toBe(3);
    expect(sampleValue(families, 'berth_refusals_total', { code: 'unauthorized' })).toBe(1);
    expect(sampleValue(families, 'berth_sandboxes', { backend: 'docker', state: 'active', lifecycle: 'ephemeral' })).toBe(1);
    expect(sampleValue(families, 'berth_sessions_open')).toBe(1);
    expect(sampleValue(families, 'berth_server_inflight_calls')).toBeGreaterThanOrEqual(1);
    expect(families.get('berth_exec_duration_seconds')?.type).toBe('histogram');
    expect(families.get('berth_calls_total')?.type).toBe('counter');

    // Nothing that names who or what: no session, user, command text, tenant or token.
    for (const secret of [session, '998877', 'cmd-marker', 'acme', tenantToken, mToken, 'mcp-']) expect(text).not.toContain(secret);
    const labelNames = new Set([...families.values()].flatMap((f) => f.samples.flatMap((s) => Object.keys(s.labels))));
    // berth's own labels, the runtime metrics' (node's version, heap space, gc type) and build info's version: never an id.
    const allowed = ['backend', 'code', 'cold', 'direction', 'kind', 'le', 'lifecycle', 'log', 'major', 'minor', 'patch', 'reason', 'space', 'state', 'type', 'version'];
    expect([...labelNames].sort()).toEqual(allowed.filter((l) => labelNames.has(l)));
    expect(labelNames.has('tenant')).toBe(false);

    // A closed session's sandbox is gone from the gauge.
    expect((await api.post('/v1/sessions/close', { session, user })).status).toBe(200);
    const after = await scrape(server, mToken);
    expect(sampleValue(after.families, 'berth_sandboxes', { backend: 'docker', state: 'active', lifecycle: 'ephemeral' })).toBeUndefined();
    expect(sampleValue(after.families, 'berth_sessions_open')).toBe(0);
    await server.stop();
  });

  it('the orphan reaper\'s removals after a crash are counted; per-tenant labels only when server.metrics.perTenant is on', async () => {
    const t = reg.track();
    t.writeConfig(dockerConfigYaml({ persistent: false, server: { metrics: { perTenant: true } } }));
    const tenantToken = await createToken(t, 'acme');
    const mToken = await metricsToken(t);
    const first = await ServeProcess.start(t);
    expect((await first.client(tenantToken).post('/v1/exec', { session: 's1', command: 'true' })).status).toBe(200);
    // The server dies holding the session: its ephemeral sandbox is an orphan for the next one.
    await first.stop('SIGKILL');
    expect(await t.containers()).toHaveLength(1);

    const second = await ServeProcess.start(t);
    expect((await second.client(tenantToken).post('/v1/exec', { session: 's2', command: 'true' })).status).toBe(200);
    const { text, families } = await scrape(second, mToken);
    expect(sampleValue(families, 'berth_reaper_removals_total', { reason: 'orphan', backend: 'docker' })).toBe(1);
    expect(sampleValue(families, 'berth_calls_total', { kind: 'exec', backend: 'docker', tenant: 'acme' })).toBe(1);
    expect(sampleValue(families, 'berth_sessions_open', { tenant: 'acme' })).toBe(1);
    expect(sampleValue(families, 'berth_sandboxes', { backend: 'docker', state: 'active', lifecycle: 'ephemeral', tenant: 'acme' })).toBe(1);
    // Still no session id, even with tenants on.
    expect(text).not.toContain('s2"');
    expect((await t.containers())).toHaveLength(1);
    await second.stop();
  });
});
