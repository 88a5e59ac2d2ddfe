import { createHash } from 'node:crypto';
import { expect, it } from 'vitest';
import {
  containersOf, describeContainers, describeDocker, dockerConfigYaml, installs, type TestInstall, dockerSuiteHooks,
} from '../helpers/docker-e2e.js';
import { runBerth } from '../helpers/cli.js';
import { createToken, qs, ServeProcess, stopAll, type ApiClient } from '../helpers/serve.js';

/*
 * A real `berth serve` on the real engine: two tenants with the same session ids never cross
 * (exec, list, audit, jobs, close), 50 concurrent clients each get their own results, and SSE
 * streams chunks before the result.
 */

const reg = installs('berth-srv-');

async function serve(t: TestInstall, tenants: string[], extra: Record<string, unknown> = {}): Promise<{ server: ServeProcess; clients: ApiClient[] }> {
  t.writeConfig(dockerConfigYaml({ persistent: false, ...extra }));
  const tokens = [];
  for (const tenant of tenants) tokens.push(await createToken(t, tenant));
  const server = await ServeProcess.start(t);
  return { server, clients: tokens.map((tok) => server.client(tok)) };
}

describeDocker('berth serve: tenants, concurrency and streaming on the real engine', () => {
  dockerSuiteHooks(reg, stopAll);

  it('two tokens, same session ids: separate sandboxes, lists, audits, jobs and closes', async () => {
    const t = reg.track();
    const { server, clients: [a, b] } = await serve(t, ['acme', 'beta']);
    const A = a as ApiClient;
    const B = b as ApiClient;

    const ea = await A.post('/v1/explain', { session: 's1' });
    const eb = await B.post('/v1/explain', { session: 's1' });
    expect([ea.body.sandboxKey, ea.body.tenant]).toEqual(['session:s1', 'acme']);
    expect([eb.body.sandboxKey, eb.body.tenant]).toEqual(['session:s1', 'beta']);

    // exec: same key, different sandboxes
    const wa = await A.post('/v1/exec', { session: 's1', command: 'echo acme-secret > /root/mine; hostname' });
    const wb = await B.post('/v1/exec', { session: 's1', command: 'echo beta-secret > /root/mine; hostname' });
    expect(wa.status, JSON.stringify(wa.body)).toBe(200);
    expect(wb.status, JSON.stringify(wb.body)).toBe(200);
    expect(wa.body.stdout).not.toBe(wb.body.stdout);
    expect((await A.post('/v1/exec', { session: 's1', command: 'cat /root/mine' })).body.stdout).toBe('acme-secret\n');
    expect((await B.post('/v1/exec', { session: 's1', command: 'cat /root/mine' })).body.stdout).toBe('beta-secret\n');
    const containers = await t.containers();
    expect(containers.map((c) => c.labels['berth.tenant']).sort(), describeContainers(containers)).toEqual(['acme', 'beta']);

    // list: each tenant sees only its own
    const la = (await A.get('/v1/sandboxes')).body as { tenant: string; sandboxKey: string }[];
    const lb = (await B.get('/v1/sandboxes')).body as { tenant: string; sandboxKey: string }[];
    expect(la.map((s) => [s.tenant, s.sandboxKey])).toEqual([['acme', 'session:s1']]);
    expect(lb.map((s) => [s.tenant, s.sandboxKey])).toEqual([['beta', 'session:s1']]);

    // audit: never the other tenant's commands, whatever the filter
    const auditA = (await A.get(`/v1/audit${qs({ session: 's1' })}`)).body as { tenant: string; command: string | null }[];
    expect(auditA.length).toBeGreaterThan(0);
    expect(auditA.every((e) => e.tenant === 'acme')).toBe(true);
    expect(auditA.map((e) => e.command).join('\n')).not.toContain('beta-secret');
    expect(((await B.get('/v1/audit')).body as { command: string | null }[]).map((e) => e.command).join('\n')).not.toContain('acme-secret');

    // jobs: A's job id is "not found" for B (read, kill, list), and survives B's attempt
    const job = await A.post('/v1/jobs', { session: 's1', command: 'sleep 600' });
    expect(job.status, JSON.stringify(job.body)).toBe(201);
    const id = job.body.jobId as string;
    expect((await B.get(`/v1/jobs/${id}${qs({ session: 's1' })}`)).status).toBe(404);
    expect((await B.delete(`/v1/jobs/${id}${qs({ session: 's1' })}`)).status).toBe(404);
    expect((await B.get(`/v1/jobs${qs({ session: 's1' })}`)).body).toEqual([]);
    expect((await A.get(`/v1/jobs/${id}${qs({ session: 's1' })}`)).body.status).toBe('running');
    // ...and for A's own other session too
    expect((await A.get(`/v1/jobs/${id}${qs({ session: 's2' })}`)).status).toBe(404);

    // close: B closing "s1" removes B's sandbox only
    const closed = await B.post('/v1/sessions/close', { session: 's1' });
    expect(closed.body).toEqual({ removed: ['session:s1'], kept: [], wasOpen: true });
    expect((await t.containers()).map((c) => c.labels['berth.tenant'])).toEqual(['acme']);
    expect((await A.post('/v1/exec', { session: 's1', command: 'cat /root/mine' })).body.stdout).toBe('acme-secret\n');
    expect((await A.get(`/v1/jobs/${id}${qs({ session: 's1' })}`)).body.status).toBe('running');
    expect((await B.get('/v1/sandboxes')).body).toEqual([]);
    await server.stop();
  }, 120_000);

  it("per-user values belong to (tenant, platform, id): tenant B naming tenant A's user id gets none of A's values", async () => {
    const t = reg.track();
    t.writeConfig(dockerConfigYaml({ persistent: false }));
    const [tokA, tokB] = [await createToken(t, 'acme'), await createToken(t, 'beta')];
    const env = {
      ...t.env,
      BERTH_USER_TELEGRAM_111_GITHUB_TOKEN: 'local-tenant-token-111',
      BERTH_USER__acme_TELEGRAM_111_GITHUB_TOKEN: 'acme-tenant-token-111',
    };
    const server = await ServeProcess.start({ env, dir: t.dir });
    const [a, b] = [server.client(tokA), server.client(tokB)];
    const sha = (v: string) => createHash('sha256').update(v).digest('hex');
    const probe = 'printf %s "${GITHUB_TOKEN-unset}" | sha256sum | cut -d" " -f1; printf %s "${GITHUB_TOKEN-unset}"';
    const ra = await (a as ApiClient).post('/v1/exec', { user: 'telegram:111', command: probe });
    const rb = await (b as ApiClient).post('/v1/exec', { user: 'telegram:111', command: probe });
    expect(ra.status, JSON.stringify(ra.body)).toBe(200);
    // acme's own value (redacted in the output, so compared by hash), never tenant local's bare one
    expect(ra.body.stdout).toBe(`${sha('acme-tenant-token-111')}\n[REDACTED]`);
    expect(rb.body.stdout).toBe(`${sha('unset')}\nunset`);
    expect((await (b as ApiClient).post('/v1/explain', { user: 'telegram:111' })).body.envNames).toEqual([]);
  });

  it('a tenant past limits.memoryMb gets 429 naming the limit and nothing is created; another tenant goes on; berth top shows both; the CLI exits 125', async () => {
    const t = reg.track();
    const { server, clients: [a, b] } = await serve(t, ['acme', 'beta'], { limits: { memoryMb: 2560 }, docker: { memoryMb: 1024 } });
    const A = a as ApiClient;
    for (const s of ['m1', 'm2']) expect((await A.post('/v1/exec', { session: s, command: 'true' })).status).toBe(200);
    const over = await A.post('/v1/exec', { session: 'm3', command: 'echo should-not-run' });
    expect(over.status).toBe(429);
    expect(over.body.error.code).toBe('tenant_limit');
    expect(over.body.error.message).toBe('sandbox "session:m3" was not created: tenant "acme" has sandboxes with 2048 MiB of memory limits and this one ' +
      'would add 1024 MiB, past its limit (limits.memoryMb = 2560); close a session (its ephemeral sandbox goes) or remove a sandbox (berth rm), ' +
      'lower the sandboxes\' memoryMb, or raise limits.memoryMb');
    expect((await containersOf(t.installation)).filter((c) => c.labels['berth.key'] === 'session:m3' && c.labels['berth.tenant'] === 'acme')).toEqual([]);
    expect((await (b as ApiClient).post('/v1/exec', { session: 'm3', command: 'echo beta' })).body.stdout).toBe('beta\n');
    const top = await runBerth(['top', '--once'], { env: t.env, cwd: t.dir });
    expect(top.stdout).toMatch(/^acme +2\/50 +2\.0 GiB \/ 2\.5 GiB +20 GiB \/ /m);
    expect(top.stdout).toMatch(/^beta +1\/50 +1\.0 GiB \/ 2\.5 GiB +10 GiB \/ /m);
    const cli = await runBerth(['exec', '--tenant', 'acme', '--session', 'm4', '--', 'true'], { env: t.env, cwd: t.dir });
    expect(cli).toMatchObject({ code: 125, stdout: '' });
    expect(cli.stderr).toMatch(/^berth: sandbox "session:m4" was not created: tenant "acme" has sandboxes with 2048 MiB of memory limits .*limits\.memoryMb = 2560/);
    await server.stop();
  });

  it('50 concurrent clients in their own sessions: every result correct, no cross-talk', async () => {
    const t = reg.track();
    // One tenant's 50 calls and sandboxes at once: above the default limits.concurrentCalls (16) and, with 2 GiB
    // memory limits each, above this host's memory and disk (the defaults of limits.memoryMb and diskMb), so those are raised here.
    const { server, clients: [api] } = await serve(t, ['many'], { limits: { concurrentCalls: 64, memoryMb: 50 * 2048, diskMb: 50 * 10_240 } });
    const A = api as ApiClient;
    const N = 50;
    const started = Date.now();
    const results = await Promise.all(Array.from({ length: N }, async (_, i) => {
      const session = `c${i}`;
      const out: string[] = [];
      const w = await A.post('/v1/exec', { session, command: `echo ${session} > /root/who; export ME=${session}; cd /tmp` });
      if (w.status !== 200) return { session, error: `${w.status} ${JSON.stringify(w.body)}` };
      for (let k = 0; k < 3; k++) {
        const r = await A.post('/v1/exec', { session, command: `cat /root/who; echo "$ME $(pwd) ${k}"; hostname` });
        if (r.status !== 200) return { session, error: `${r.status} ${JSON.stringify(r.body)}` };
        out.push(r.body.stdout as string);
      }
      return { session, out };
    }));
    const errors = results.filter((r) => 'error' in r);
    expect(errors, JSON.stringify(errors.slice(0, 3))).toEqual([]);
    const hosts = new Set<string>();
    for (const r of results as { session: string; out: string[] }[]) {
      r.out.forEach((o, k) => {
        const [who, line, host] = o.trimEnd().split('\n');
        expect([who, line]).toEqual([r.session, `${r.session} /tmp ${k}`]);
        hosts.add(host as string);
      });
      expect(new Set(r.out.map((o) => o.split('\n')[2])).size).toBe(1);
    }
    expect(hosts.size).toBe(N);
    expect((await containersOf(t.installation)).length).toBe(N);
    console.log(`50 concurrent sessions (create + 4 commands each) in ${Date.now() - started} ms`);
    // Removing 50 containers on a loaded 2-core machine can take longer than the usual 30 s.
    const res = await server.stop('SIGTERM', 120_000);
    expect(res.code).toBe(0);
    expect(await containersOf(t.installation)).toEqual([]);
  }, 300_000);

  it('SSE: stdout and stderr chunks in order, then exactly one result, last', async () => {
    const t = reg.track();
    const { server, clients: [api] } = await serve(t, ['sse']);
    const A = api as ApiClient;
    const cmd = 'for i in 1 2 3; do echo out$i; sleep 0.15; echo err$i >&2; sleep 0.15; done; exit 4';
    for (const viaAccept of [false, true]) {
      let events: { event: string; data: unknown }[];
      if (viaAccept) {
        const res = await fetch(`${server.url}/v1/exec`, {
          method: 'POST',
          headers: { authorization: `Bearer ${A.token}`, 'content-type': 'application/json', accept: 'text/event-stream' },
          body: JSON.stringify({ session: 'st', command: cmd }),
        });
        expect(res.headers.get('content-type')).toMatch(/^text\/event-stream/);
        events = parseSse(await res.text());
      } else {
        events = (await A.stream({ session: 'st', command: cmd })).events;
      }
      const kinds = events.map((e) => e.event);
      expect(kinds[kinds.length - 1]).toBe('result');
      expect(kinds.filter((k) => k === 'result')).toHaveLength(1);
      expect(kinds.slice(0, -1).every((k) => k === 'stdout' || k === 'stderr')).toBe(true);
      const chunks = events.slice(0, -1).map((e) => `${e.event}:${String(e.data)}`).join('');
      expect(chunks).toBe('stdout:out1\nstderr:err1\nstdout:out2\nstderr:err2\nstdout:out3\nstderr:err3\n');
      const result = events[events.length - 1]?.data as { exitCode: number; stdout: string; stderr: string; output: string };
      expect(result.exitCode).toBe(4);
      expect(result.stdout).toBe('out1\nout2\nout3\n');
      expect(result.output).toBe('out1\nerr1\nout2\nerr2\nout3\nerr3\n');
    }
    // Bad input is refused before any stream starts: a plain JSON 400.
    const bad = await fetch(`${server.url}/v1/exec/stream`, {
      method: 'POST', headers: { authorization: `Bearer ${A.token}`, 'content-type': 'application/json' }, body: '{"command":5}',
    });
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as { error: { code: string } }).error.code).toBe('bad_request');
    await server.stop();
  }, 60_000);
});

function parseSse(text: string): { event: string; data: unknown }[] {
  return text.split('\n\n').filter((b) => b.trim() !== '').map((block) => {
    let event = 'message';
    let data = '';
    for (const line of block.split('\n')) {
      if (line.startsWith('event: ')) event = line.slice(7);
      else if (line.startsWith('data: ')) data += line.slice(6);
    }
    return { event, data: JSON.parse(data) as unknown };
  });
}
