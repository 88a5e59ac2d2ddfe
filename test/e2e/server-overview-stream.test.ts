import { expect, it, onTestFinished } from 'vitest';
import type { Broker } from '../../src/broker/broker.js';
import type { OverviewView } from '../../src/server/overview-view.js';
import { MAX_STREAMS_PER_TENANT } from '../../src/server/overview-stream.js';
import { BerthServer } from '../../src/server/server.js';
import { TokenStore } from '../../src/server/tokens.js';
import { describeDocker, dockerConfig, dockerSuiteHooks, installs, waitFor, type TestInstall } from '../helpers/docker-e2e.js';
import { ApiClient } from '../helpers/serve.js';
import { SseReader, type SseEvent } from '../helpers/sse-reader.js';

/*
 * GET /v1/overview/stream on a real server over the real engine, without a browser: who may open
 * it (as /v1/sandboxes), what each token sees (its tenant and profiles, never another's, in any
 * update), that a call pushes an update without waiting for the interval, and that a client that
 * goes away leaves no stream and no timer behind.
 */

const reg = installs('berth-ovs-');

interface Setup {
  broker: Broker;
  server: BerthServer;
  tokens: TokenStore;
}

/** An in-process server whose streams update only when a call ends (the interval is an hour). */
async function start(t: TestInstall): Promise<Setup> {
  const broker = await t.open(dockerConfig({ persistent: false, profiles: { bot: {} } }));
  const tokens = TokenStore.open(broker.berthHome);
  const server = await BerthServer.start({ broker, tokens, port: 0, overview: { intervalMs: 3_600_000, soonMs: 50 } });
  onTestFinished(async () => {
    await server.close({ graceMs: 2_000 });
    tokens.close();
  });
  return { broker, server, tokens };
}

async function open(server: BerthServer, token: string | undefined): Promise<{ res: Response; abort: () => void }> {
  const ac = new AbortController();
  const headers: Record<string, string> = { accept: 'text/event-stream' };
  if (token !== undefined) headers['authorization'] = `Bearer ${token}`;
  const res = await fetch(`${server.url}/v1/overview/stream`, { headers, signal: ac.signal });
  return { res, abort: () => ac.abort() };
}

const overview = (e: SseEvent): OverviewView | undefined => (e.event === 'overview' ? (e.data as OverviewView) : undefined);

describeDocker('GET /v1/overview/stream (docker)', () => {
  dockerSuiteHooks(reg);

  it('no token is 401, a bad one 401, a metrics token 403 (as /v1/sandboxes); a tenant token gets an event stream', async () => {
    const { server, tokens } = await start(reg.track());
    expect((await open(server, undefined)).res.status).toBe(401);
    expect((await open(server, `berth_${'x'.repeat(43)}`)).res.status).toBe(401);
    const metrics = await open(server, tokens.createMetrics().token);
    expect(metrics.res.status).toBe(403);
    expect(((await metrics.res.json()) as { error: { code: string } }).error.code).toBe('policy_refused');
    const sandboxesAsMetrics = await new ApiClient(server.url, tokens.createMetrics().token).get('/v1/sandboxes');
    expect(sandboxesAsMetrics.status).toBe(403);

    const ok = await open(server, tokens.create('acme').token);
    expect(ok.res.status).toBe(200);
    expect(ok.res.headers.get('content-type')).toMatch(/^text\/event-stream/);
    const events = new SseReader(ok.res);
    const first = overview(await events.next((e) => e.event === 'overview', 10_000));
    expect(first).toMatchObject({ tenant: 'acme', sandboxes: [], jobs: [], calls: [] });
    expect(first?.history).toHaveLength(60);
    ok.abort();
  }, 60_000);

  it('a token sees its own tenant and profiles only, in every update; a call pushes one without waiting', async () => {
    const { server, tokens } = await start(reg.track());
    const acme = tokens.create('acme').token;
    const beta = tokens.create('beta').token;
    const acmeBot = tokens.create('acme', ['bot']).token;
    const A = new ApiClient(server.url, acme);
    const B = new ApiClient(server.url, beta);
    const AB = new ApiClient(server.url, acmeBot);

    const a = await open(server, acme);
    const b = await open(server, beta);
    const aEvents = new SseReader(a.res);
    const bEvents = new SseReader(b.res);
    await aEvents.next((e) => e.event === 'overview', 10_000);
    await bEvents.next((e) => e.event === 'overview', 10_000);

    // Other tenants' and other profiles' work, with the same session id.
    expect((await B.post('/v1/exec', { session: 's1', command: 'echo beta-marker' })).status).toBe(200);
    expect((await B.post('/v1/jobs', { session: 's1', command: 'sleep 300' })).status).toBe(201);
    expect((await AB.post('/v1/exec', { profile: 'bot', session: 'bot-only', command: 'echo bot-marker' })).status).toBe(200);
    // Its own, after which an update must come (the interval is an hour: only the call can push it).
    const run = await A.post('/v1/exec', { session: 's1', command: 'echo acme-marker' });
    expect(run.status, JSON.stringify(run.body)).toBe(200);
    const job = await A.post('/v1/jobs', { session: 's1', command: 'sleep 300' });
    expect(job.status).toBe(201);
    const seen = overview(await aEvents.next((e) => (overview(e)?.jobs.length ?? 0) > 0, 20_000)) as OverviewView;

    expect(seen.sandboxes.map((s) => [s.tenant, s.profile, s.sandboxKey, s.state])).toEqual([['acme', 'default', 'session:s1', 'active']]);
    const usage = seen.sandboxes[0]?.usage;
    expect(usage?.memoryBytes).toBeGreaterThan(0);
    expect(usage?.diskBytes).toBeTypeOf('number');
    expect(seen.jobs.map((j) => [j.jobId, j.status, j.scope])).toEqual([[job.body.jobId, 'running', { profile: 'default', session: 's1' }]]);
    expect(seen.calls.map((c) => c.command)).toContain('echo acme-marker');
    // One exec call of acme's default profile, in this minute.
    expect(seen.history.reduce((n, p) => n + p.execCalls, 0)).toBe(1);
    expect(seen.history.slice(-2).some((p) => typeof p.p50Ms === 'number')).toBe(true);
    // The open session is counted (in the last minute, or the one before when the update crossed a minute).
    expect(Math.max(...seen.history.slice(-2).map((p) => p.sessions ?? 0))).toBeGreaterThanOrEqual(1);

    // Beta's stream: its own only.
    const bSeen = overview(await bEvents.next((e) => (overview(e)?.jobs.length ?? 0) > 0, 20_000)) as OverviewView;
    expect(bSeen.sandboxes.map((s) => [s.tenant, s.sandboxKey])).toEqual([['beta', 'session:s1']]);
    expect(JSON.stringify(bSeen)).not.toContain('acme-marker');

    // No update of acme's ever carried another tenant's or another profile's work.
    const all = JSON.stringify(aEvents.events);
    for (const foreign of ['beta', 'bot-only', 'bot-marker']) expect(all).not.toContain(foreign);
    // The bot token sees the bot profile and nothing of default.
    const ab = await open(server, acmeBot);
    const abSeen = overview(await new SseReader(ab.res).next((e) => e.event === 'overview', 10_000)) as OverviewView;
    expect(abSeen.sandboxes.map((s) => [s.profile, s.sandboxKey])).toEqual([['bot', 'session:bot-only']]);
    expect(abSeen.jobs).toEqual([]);
    expect(JSON.stringify(abSeen)).not.toContain('acme-marker');
    for (const s of [a, b, ab]) s.abort();
    await A.request('DELETE', `/v1/jobs/${job.body.jobId}?session=s1`);
  }, 120_000);

  it('a client that goes away leaves no stream and no timer; closing the server ends the streams still open', async () => {
    const { server, tokens } = await start(reg.track());
    const token = tokens.create('acme').token;
    const one = await open(server, token);
    const two = await open(server, token);
    await new SseReader(one.res).next((e) => e.event === 'overview', 10_000);
    const twoEvents = new SseReader(two.res);
    await twoEvents.next((e) => e.event === 'overview', 10_000);
    expect(server.overviewStreams.open).toBe(2);
    expect(server.overviewStreams.timers).toBeLessThanOrEqual(2);
    one.abort();
    expect(await waitFor(() => server.overviewStreams.open === 1, 10_000)).toBe(true);
    two.abort();
    expect(await waitFor(() => server.overviewStreams.open === 0, 10_000)).toBe(true);
    expect(server.overviewStreams).toEqual({ open: 0, timers: 0 });

    const three = await open(server, token);
    const threeEvents = new SseReader(three.res);
    await threeEvents.next((e) => e.event === 'overview', 10_000);
    await server.close({ graceMs: 30_000 });
    await threeEvents.done;
    expect(server.overviewStreams).toEqual({ open: 0, timers: 0 });
  }, 60_000);

  it('a token revoked while its stream is open ends the stream at the next update, with an unauthorized event', async () => {
    const { server, tokens } = await start(reg.track());
    const watched = tokens.create('acme');
    const other = new ApiClient(server.url, tokens.create('acme').token);
    const s = await open(server, watched.token);
    const events = new SseReader(s.res);
    await events.next((e) => e.event === 'overview', 10_000);
    expect(tokens.revoke(watched.entry.id)).toBe(true);
    // A call of the tenant is what brings the next update (the interval is an hour).
    expect((await other.post('/v1/exec', { session: 'x', command: 'true' })).status).toBe(200);
    const ended = await events.next((e) => e.event === 'error', 20_000);
    expect(ended.data).toMatchObject({ error: { code: 'unauthorized' } });
    await events.done;
    expect(events.events.filter((e) => e.event === 'overview')).toHaveLength(1);
    expect(await waitFor(() => server.overviewStreams.open === 0, 10_000)).toBe(true);
  }, 60_000);

  it(`a tenant may hold ${MAX_STREAMS_PER_TENANT} streams; one more is 429, another tenant is not affected`, async () => {
    const { server, tokens } = await start(reg.track());
    const token = tokens.create('acme').token;
    const streams = [];
    for (let i = 0; i < MAX_STREAMS_PER_TENANT; i++) {
      const s = await open(server, token);
      expect(s.res.status).toBe(200);
      streams.push(s);
    }
    const extra = await open(server, token);
    expect(extra.res.status).toBe(429);
    expect(((await extra.res.json()) as { error: { code: string } }).error.code).toBe('too_many_calls');
    const other = await open(server, tokens.create('beta').token);
    expect(other.res.status).toBe(200);
    for (const s of [...streams, other]) s.abort();
    expect(await waitFor(() => server.overviewStreams.open === 0, 10_000)).toBe(true);
  }, 60_000);
});
