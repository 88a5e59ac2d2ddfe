import { afterEach, describe, expect, it } from 'vitest';
import { tempInstall } from '../helpers/cli.js';
import { createToken, qs, ServeProcess, stopAll, type ApiClient } from '../helpers/serve.js';

/*
 * A token is a tenant plus the profiles it may use (docs/design.md §8). Through a real `berth serve`
 * (local backend, which the config explicitly allows remote callers to use, to keep this fast):
 * every route that names a profile, in the body or the query, refuses one outside the token's
 * list with 403 profile_forbidden, and listings show only the token's profiles.
 */

const CONFIG = [
  'backend: local',
  'persistent: false',
  'server:',
  '  allowHostBackend: true',
  'profiles:',
  '  team:',
  '    scope: shared',
  '    sharedKey: crew',
  '',
].join('\n');

afterEach(() => stopAll());

type Req = { method: string; path: string; body?: unknown };

/** Every /v1 route that takes a call scope, with `profile` set (absent when `profile` is undefined). */
function scopedRequests(profile: string | undefined): Req[] {
  const p = profile === undefined ? {} : { profile };
  const q = (extra: Record<string, string> = {}) => qs({ ...p, session: 's', ...extra });
  return [
    { method: 'POST', path: '/v1/explain', body: { ...p, session: 's' } },
    { method: 'POST', path: '/v1/exec', body: { ...p, session: 's', command: 'touch forbidden-ran' } },
    { method: 'POST', path: '/v1/exec/stream', body: { ...p, session: 's', command: 'touch forbidden-ran' } },
    { method: 'POST', path: '/v1/sessions/close', body: { ...p, session: 's' } },
    { method: 'POST', path: '/v1/jobs', body: { ...p, session: 's', command: 'touch forbidden-ran' } },
    { method: 'GET', path: `/v1/jobs${q()}` },
    { method: 'GET', path: `/v1/jobs/job_0123456789abcdef${q()}` },
    { method: 'DELETE', path: `/v1/jobs/job_0123456789abcdef${q()}` },
    { method: 'PUT', path: `/v1/files${q({ path: 'forbidden.txt' })}`, body: 'data' },
    { method: 'GET', path: `/v1/files${q({ path: 'forbidden.txt' })}` },
    { method: 'POST', path: '/v1/files/export', body: { ...p, session: 's', path: 'forbidden.txt' } },
    { method: 'GET', path: `/v1/files/exports/0123456789abcdef${q()}` },
  ];
}

async function send(c: ApiClient, r: Req): Promise<{ status: number; body: any }> { // eslint-disable-line @typescript-eslint/no-explicit-any
  if (r.method === 'PUT') {
    const res = await fetch(`${c.url}${r.path}`, { method: 'PUT', headers: { authorization: `Bearer ${c.token}` }, body: r.body as string });
    return { status: res.status, body: await res.json() };
  }
  return c.request(r.method, r.path, r.body);
}

describe('berth serve: a token may use only its own profiles', () => {
  it('every scoped route answers 403 profile_forbidden outside the token\'s profiles, and nothing runs', async () => {
    using t = tempInstall(CONFIG);
    const onlyDefault = await createToken(t, 'acme');
    const onlyBot = await createToken(t, 'acme', ['bot']);
    const both = await createToken(t, 'acme', ['default', 'bot']);
    await using server = await ServeProcess.start(t);
    const D = server.client(onlyDefault);
    const B = server.client(onlyBot);
    const all = server.client(both);

    // Its own token by id (never the secret), as the audit names it.
    expect((await D.get('/v1/whoami')).body).toEqual({ tenant: 'acme', profiles: ['default'], token: { id: expect.stringMatching(/^tok_[0-9a-f]{12}$/) } });
    expect((await B.get('/v1/whoami')).body).toEqual({ tenant: 'acme', profiles: ['bot'], token: { id: expect.stringMatching(/^tok_[0-9a-f]{12}$/) } });

    const cases: [ApiClient, string | undefined, string][] = [[D, 'bot', 'default'], [D, 'team', 'default'], [B, undefined, 'bot'], [B, 'default', 'bot']];
    for (const [client, profile, allowed] of cases) {
      for (const r of scopedRequests(profile)) {
        const res = await send(client, r);
        const what = `${r.method} ${r.path} with profile ${profile ?? '(none)'}`;
        expect(res.status, `${what}: ${JSON.stringify(res.body)}`).toBe(403);
        expect(res.body.error.code, what).toBe('profile_forbidden');
        expect(res.body.error.message, what).toMatch(new RegExp(`profile "${profile ?? 'default'}".*may use only: ${allowed}`));
      }
    }
    // Nothing ran and nothing was recorded, for any profile.
    expect((await all.get('/v1/sandboxes')).body).toEqual([]);
    expect((await all.get('/v1/audit')).body).toEqual([]);

    // Inside their lists the same tokens work.
    expect((await D.post('/v1/exec', { session: 's', command: 'echo d' })).body.stdout).toBe('d\n');
    expect((await B.post('/v1/exec', { profile: 'bot', session: 's', command: 'echo b' })).body.stdout).toBe('b\n');
    // A bad profile name is still bad input (400) before it is a forbidden one.
    expect((await D.post('/v1/exec', { profile: '../x', command: 'true' })).status).toBe(400);
  });

  it('/v1/sandboxes and /v1/audit show only the token\'s profiles (shared:* sandboxes, which belong to no profile, stay visible)', async () => {
    using t = tempInstall(CONFIG);
    const onlyDefault = await createToken(t, 'acme');
    const onlyBot = await createToken(t, 'acme', ['bot']);
    const withTeam = await createToken(t, 'acme', ['default', 'bot', 'team']);
    await using server = await ServeProcess.start(t);
    const D = server.client(onlyDefault);
    const B = server.client(onlyBot);
    const all = server.client(withTeam);

    expect((await D.post('/v1/exec', { session: 's1', command: 'echo default-secret' })).status).toBe(200);
    expect((await B.post('/v1/exec', { profile: 'bot', session: 's1', command: 'echo bot-secret' })).status).toBe(200);
    expect((await all.post('/v1/exec', { profile: 'team', session: 's1', command: 'echo team-secret' })).status).toBe(200);

    const keys = async (c: ApiClient) => ((await c.get('/v1/sandboxes')).body as { profile: string | null; sandboxKey: string }[])
      .map((s) => `${s.profile ?? '-'} ${s.sandboxKey}`).sort();
    expect(await keys(D)).toEqual(['- shared:crew', 'default session:s1']);
    expect(await keys(B)).toEqual(['- shared:crew', 'bot session:s1']);
    expect(await keys(all)).toEqual(['- shared:crew', 'bot session:s1', 'default session:s1']);

    const audit = async (c: ApiClient, query = '') => ((await c.get(`/v1/audit${query}`)).body as { profile: string; command: string | null }[]);
    expect((await audit(D)).map((e) => e.profile)).toEqual(['default']);
    expect(JSON.stringify(await audit(D))).not.toMatch(/bot-secret|team-secret/);
    expect((await audit(B, qs({ session: 's1' }))).map((e) => e.command)).toEqual(['echo bot-secret']);
    expect((await audit(all)).map((e) => e.profile).sort()).toEqual(['bot', 'default', 'team']);
  });

  it('MCP over HTTP: x-berth-profile outside the token\'s profiles (or none, when default is not allowed) is 403 on initialize', async () => {
    using t = tempInstall(CONFIG);
    const onlyDefault = await createToken(t, 'acme');
    const onlyBot = await createToken(t, 'acme', ['bot']);
    await using server = await ServeProcess.start(t);
    const init = (token: string, headers: Record<string, string> = {}) => fetch(new URL('/mcp', server.url), {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...headers },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'raw', version: '1' } } }),
    });
    for (const [token, headers, allowed, asked] of [
      [onlyDefault, { 'x-berth-profile': 'bot' }, 'default', 'bot'],
      [onlyBot, {}, 'bot', 'default'],
      [onlyBot, { 'x-berth-profile': 'default' }, 'bot', 'default'],
    ] as const) {
      const r = await init(token, headers);
      expect(r.status).toBe(403);
      const body = await r.json() as { error: { code: string; message: string } };
      expect(body.error.code).toBe('profile_forbidden');
      expect(body.error.message).toMatch(new RegExp(`profile "${asked}".*may use only: ${allowed}`));
    }
    expect((await init(onlyBot, { 'x-berth-profile': 'bot' })).status).toBe(200);
    expect((await init(onlyDefault)).status).toBe(200);
  });
});
