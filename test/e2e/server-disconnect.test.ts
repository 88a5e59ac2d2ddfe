import { Agent, request } from 'node:http';
import { expect, it } from 'vitest';
import { describeDocker, dockerConfigYaml, dockerSuiteHooks, installs, type TestInstall } from '../helpers/docker-e2e.js';
import { createToken, qs, ServeProcess, stopAll, type ApiClient } from '../helpers/serve.js';

/*
 * A client that goes away mid-call cancels its command (tree killed as on a
 * timeout, exit code 130 in the audit), so nothing of it runs on unseen and the session's next
 * call does not wait for it. Through a real `berth serve` on the real engine, over real sockets.
 */

const reg = installs('berth-disc-');

async function serve(t: TestInstall): Promise<{ server: ServeProcess; api: ApiClient; token: string }> {
  t.writeConfig(dockerConfigYaml({ persistent: false }));
  const token = await createToken(t, 'acme');
  const server = await ServeProcess.start(t);
  return { server, api: server.client(token), token };
}

/** POST a JSON body, then drop the connection once `until` says so (on a chunk of the answer, or at once). */
function postThenDisconnect(url: string, token: string, path: string, body: unknown, headers: Record<string, string>, until: 'first-event' | 'sent', agent?: Agent): Promise<string> {
  return new Promise((resolve, reject) => {
    const req = request(`${url}${path}`, {
      method: 'POST', ...(agent === undefined ? {} : { agent }),
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', ...headers },
    });
    let seen = '';
    req.on('response', (res) => {
      res.setEncoding('utf8');
      res.on('data', (d: string) => {
        seen += d;
        if (until === 'first-event' && /event: stdout\n/.test(seen)) {
          req.destroy();
          resolve(seen);
        }
      });
    });
    req.on('error', (err) => {
      if (until === 'sent' || seen !== '') resolve(seen);
      else reject(err);
    });
    // A request on a kept-alive connection that already answered one: its cancel is the connection's.
    if (agent !== undefined) req.on('socket', () => req.reusedSocket || reject(new Error('the kept-alive connection was not reused')));
    req.end(JSON.stringify(body), () => {
      // The whole body is on the wire: let the server start the command, then hang up.
      if (until === 'sent') setTimeout(() => req.destroy(), 1_500);
    });
  });
}

/** One POST on `agent`, answered in full: its status. */
function postOn(agent: Agent, url: string, token: string, body: unknown): Promise<number | undefined> {
  return new Promise((resolve, reject) => {
    const req = request(`${url}/v1/exec`, { method: 'POST', agent, headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' } }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode));
    });
    req.on('error', reject);
    req.end(JSON.stringify(body));
  });
}

describeDocker('berth serve: a client that disconnects cancels its command', () => {
  dockerSuiteHooks(reg, stopAll);

  it('SSE (Accept: text/event-stream and /v1/exec/stream) and blocking /v1/exec: cancelled, the session answers at once', async () => {
    const t = reg.track();
    const { server, api, token } = await serve(t);
    expect((await api.post('/v1/exec', { session: 'd', command: 'export KEEP=kept' })).status).toBe(200);
    // A connection kept alive, that answered a call before the one it drops.
    const kept = new Agent({ keepAlive: true, maxSockets: 1 });
    const cases: { path: string; headers: Record<string, string>; until: 'first-event' | 'sent'; marker: string; agent?: Agent }[] = [
      { path: '/v1/exec', headers: { accept: 'text/event-stream' }, until: 'first-event', marker: '/tmp/m1' },
      { path: '/v1/exec/stream', headers: {}, until: 'first-event', marker: '/tmp/m2' },
      { path: '/v1/exec', headers: {}, until: 'sent', marker: '/tmp/m3' },
      { path: '/v1/exec', headers: {}, until: 'sent', marker: '/tmp/m4', agent: kept },
    ];
    for (const c of cases) {
      if (c.agent !== undefined) expect(await postOn(c.agent, server.url, token, { session: 'd', command: 'true' })).toBe(200);
      const seen = await postThenDisconnect(server.url, token, c.path, { session: 'd', command: `echo started; sleep 30; touch ${c.marker}` }, c.headers, c.until, c.agent);
      if (c.until === 'first-event') expect(seen).toContain('data: "started\\n"');
      // Had the command gone on, this call would wait for the sleep and then find the marker.
      const next = await api.post('/v1/exec', { session: 'd', command: `ls ${c.marker} 2>&1; ps -o args | grep -c "^sleep 30"; echo "$KEEP"`, timeoutSeconds: 20 });
      expect(next.status).toBe(200);
      expect(next.body.stdout, `${c.path} ${c.until}`).toBe(`ls: ${c.marker}: No such file or directory\n0\nkept\n`);
    }
    const audit = (await api.get(`/v1/audit${qs({ session: 'd' })}`)).body as { command: string | null; exitCode: number | null }[];
    const cancelled = audit.filter((e) => e.command?.startsWith('echo started; sleep 30'));
    expect(cancelled.map((e) => e.exitCode)).toEqual([130, 130, 130, 130]);
    kept.destroy();
    await server.stop();
  }, 120_000);
});

describeDocker('berth serve: a timed-out command', () => {
  dockerSuiteHooks(reg, stopAll);

  it('after a timeout, the notice, the result\'s cwd, explain and the next call agree on where the new shell is', async () => {
    const t = reg.track();
    const { server, api } = await serve(t);
    expect((await api.post('/v1/exec', { session: 'agree', command: 'mkdir -p /workspace/before && cd /workspace/before' })).body).toMatchObject({ exitCode: 0 });
    const r = await api.post('/v1/exec', { session: 'agree', command: 'cd /tmp && export MOVED=yes && sleep 30', timeoutSeconds: 1 });
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ exitCode: 124, timedOut: true, cwd: '/tmp' });
    expect(r.body.stderr).toContain("the command's processes were killed and a new shell took over in /tmp with the exported variables");
    expect((await api.post('/v1/explain', { session: 'agree' })).body).toMatchObject({ cwd: '/tmp' });
    const next = await api.post('/v1/exec', { session: 'agree', command: 'pwd; echo "[$MOVED]"' });
    expect(next.body).toMatchObject({ exitCode: 0, stdout: '/tmp\n[yes]\n', cwd: '/tmp' });
    await server.stop();
  }, 120_000);
});
