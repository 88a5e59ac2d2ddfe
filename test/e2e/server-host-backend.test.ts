import { afterEach, describe, expect, it } from 'vitest';
import { runBerth, tempInstall } from '../helpers/cli.js';
import { createToken, ServeProcess, stopAll } from '../helpers/serve.js';

/*
 * A host backend (`local`: no isolation, berth's own user) is never for a remote caller unless
 * the operator opted in (server.allowHostBackend), and explain says so (docs/design.md §8). Through a real
 * `berth serve`. The docker default backend is never contacted here: no call reaches an engine.
 */

afterEach(() => stopAll());

const DEV_LOCAL = 'persistent: false\nprofiles:\n  dev:\n    backend: local\n';

/** `berth serve` that is expected to refuse: it must exit on its own, well before the timeout. */
function serveOnce(t: { env: NodeJS.ProcessEnv; dir: string }) {
  return runBerth(['serve', '--port', '0'], { env: t.env, cwd: t.dir, timeoutMs: 20_000 });
}

describe('berth serve: host backend for remote callers', () => {
  it('the reproduction: a token cannot reach a profile that runs on the host (was: a host root shell)', async () => {
    using t = tempInstall(DEV_LOCAL);
    const token = await createToken(t, 'acme');
    await using server = await ServeProcess.start(t);
    const r = await server.client(token).post('/v1/exec', { profile: 'dev', command: 'cat /proc/1/environ; id' });
    expect(r.status, JSON.stringify(r.body)).toBe(403);
    expect(JSON.stringify(r.body)).not.toMatch(/uid=/);
  });

  it('refuses to start while a token may use a local profile: exit 2, one line naming the profile, the tokens and the fix', async () => {
    using t = tempInstall(DEV_LOCAL);
    await createToken(t, 'acme', ['default', 'dev']);
    await createToken(t, 'beta', ['dev']);
    await createToken(t, 'safe');
    const ids = (JSON.parse((await runBerth(['token', 'list', '--json'], { env: t.env, cwd: t.dir })).stdout) as { id: string; tenant: string }[])
      .filter((e) => e.tenant !== 'safe').map((e) => e.id);
    const r = await serveOnce(t);
    expect(r.code).toBe(2);
    expect(r.stdout).not.toMatch(/listening/);
    expect(r.stderr.split('\n').filter(Boolean)).toHaveLength(1);
    expect(r.stderr).toMatch(/^berth: profile "dev" runs on the host \(backend local, no isolation\)/);
    for (const id of ids) expect(r.stderr).toContain(id);
    expect(r.stderr).toMatch(/server\.allowHostBackend: true/);
    expect(r.stderr).toMatch(/berth token revoke/);
  });

  it('the default profile on a local base backend counts too', async () => {
    using t = tempInstall('backend: local\n');
    await createToken(t, 'acme');
    const r = await serveOnce(t);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/^berth: profile "default" runs on the host/);
  });

  it('with server.allowHostBackend: true it starts, warns loudly naming the profiles and tokens, and explain says there is no isolation', async () => {
    using t = tempInstall(`${DEV_LOCAL}server:\n  allowHostBackend: true\n`);
    const token = await createToken(t, 'acme', ['default', 'dev']);
    const id = (JSON.parse((await runBerth(['token', 'list', '--json'], { env: t.env, cwd: t.dir })).stdout) as { id: string }[])[0]!.id;
    await using server = await ServeProcess.start(t);
    expect(server.stderr).toMatch(/WARNING.*profile "dev".*runs commands on this host.*without isolation/);
    expect(server.stderr).toContain(id);
    const api = server.client(token);
    const dev = await api.post('/v1/explain', { profile: 'dev', session: 's' });
    expect(dev.body).toMatchObject({ backend: 'local', isolation: 'none', note: expect.stringMatching(/on this host as berth's user.*without isolation/) });
    const def = await api.post('/v1/explain', { session: 's' });
    expect(def.body).toMatchObject({ backend: 'docker', isolation: 'container' });
    expect(def.body).not.toHaveProperty('note');
    const ran = await api.post('/v1/exec', { profile: 'dev', session: 's', command: 'echo on-host' });
    expect(ran.body.stdout).toBe('on-host\n');
  });

  it('defence in depth: a token created after start-up for a local profile is refused per request (HTTP and MCP)', async () => {
    using t = tempInstall(DEV_LOCAL);
    await createToken(t, 'acme');
    await using server = await ServeProcess.start(t);
    const late = await createToken(t, 'acme', ['dev']);
    const api = server.client(late);
    for (const [path, body] of [['/v1/exec', { profile: 'dev', command: 'id' }], ['/v1/explain', { profile: 'dev' }], ['/v1/jobs', { profile: 'dev', session: 's', command: 'id' }]] as const) {
      const r = await api.post(path, body);
      expect(r.status, `${path}: ${JSON.stringify(r.body)}`).toBe(403);
      expect(r.body.error.code).toBe('host_backend_forbidden');
      expect(r.body.error.message).toMatch(/profile "dev" runs on the host.*server\.allowHostBackend/);
    }
    const mcp = await fetch(new URL('/mcp', server.url), {
      method: 'POST',
      headers: { authorization: `Bearer ${late}`, 'x-berth-profile': 'dev', 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'raw', version: '1' } } }),
    });
    expect(mcp.status).toBe(403);
    expect(((await mcp.json()) as { error: { code: string } }).error.code).toBe('host_backend_forbidden');
    expect((await server.client(late).get('/v1/sandboxes')).body).toEqual([]);
  });
});
