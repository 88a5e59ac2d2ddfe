import { expect, it } from 'vitest';
import {
  containerFor, describeDocker, docker, dockerConfig, dockerConfigYaml, installs, waitFor, type TestInstall, dockerSuiteHooks,
} from '../helpers/docker-e2e.js';
import { createToken, qs, ServeProcess, stopAll, type ApiClient } from '../helpers/serve.js';

/*
 * Background jobs on the real engine: through a real `berth serve` (start/read/kill, a job that
 * outlives its request, kill ends only that job's tree) and through the library (a vanished
 * sandbox is `unknown`, a running job keeps the idle reaper away).
 */

const reg = installs('berth-jobs-');

/** In-sandbox processes whose command line matches `pattern` (grep -E), counted by the sandbox itself. */
const countProcs = (pattern: string) =>
  `n=0; for p in /proc/[0-9]*; do c=$(tr '\\0' ' ' < $p/cmdline 2>/dev/null) || continue; case "$c" in *sh\\ -c\\ n=0*) continue;; esac; ` +
  `echo "$c" | grep -qE '${pattern}' && n=$((n+1)); done; echo $n`;

async function serve(t: TestInstall): Promise<{ server: ServeProcess; api: ApiClient }> {
  t.writeConfig(dockerConfigYaml({ persistent: false }));
  const token = await createToken(t, 'jobs');
  const server = await ServeProcess.start(t);
  return { server, api: server.client(token) };
}

/** Reads a job to its end, following nextOffset. */
async function readAll(api: ApiClient, session: string, id: string, timeoutMs = 30_000): Promise<{ output: string; last: Record<string, unknown>; reads: number }> {
  let offset = 0;
  let output = '';
  let reads = 0;
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const r = await api.get(`/v1/jobs/${id}${qs({ session, offset, maxBytes: 7 })}`);
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    reads++;
    output += r.body.output as string;
    expect(r.body.nextOffset).toBeGreaterThanOrEqual(offset);
    offset = r.body.nextOffset as number;
    if (r.body.done) return { output, last: r.body, reads };
    if (Date.now() > deadline) throw new Error(`job ${id} not done after ${timeoutMs} ms; output so far: ${output}`);
    await new Promise((res) => setTimeout(res, 100));
  }
}

describeDocker('berth serve: background jobs on the real engine', () => {
  dockerSuiteHooks(reg, stopAll);

  it('a job outlives its request: output from offsets (UTF-8 intact), exit code when done, the shell free meanwhile', async () => {
    const t = reg.track();
    const { server, api } = await serve(t);
    await api.post('/v1/exec', { session: 'j', command: 'export GREETING=héllo; mkdir -p /tmp/wd' });
    const t0 = Date.now();
    const start = await api.post('/v1/jobs', { session: 'j', command: 'for i in 1 2 3 4; do echo "$GREETING tick$i €"; sleep 0.4; done; pwd; exit 3', workdir: '/tmp/wd' });
    expect(start.status, JSON.stringify(start.body)).toBe(201);
    expect(Date.now() - t0).toBeLessThan(1_500);
    expect(start.body).toMatchObject({ jobId: expect.stringMatching(/^job_[0-9a-f]{16}$/), sandboxKey: 'session:j' });
    const id = start.body.jobId as string;

    // The session's shell is not held by the job.
    const quick = await api.post('/v1/exec', { session: 'j', command: 'echo free' });
    expect(quick.body.stdout).toBe('free\n');
    const listed = await api.get(`/v1/jobs${qs({ session: 'j' })}`);
    expect(listed.body).toEqual([expect.objectContaining({ jobId: id, status: 'running', exitCode: null })]);

    // 7-byte reads: characters and lines split across reads must come back whole.
    const { output, last, reads } = await readAll(api, 'j', id);
    expect(reads).toBeGreaterThan(5);
    expect(output).toBe('héllo tick1 €\nhéllo tick2 €\nhéllo tick3 €\nhéllo tick4 €\n/tmp/wd\n');
    expect(last).toMatchObject({ done: true, status: 'exited', exitCode: 3 });
    expect((await api.get(`/v1/jobs${qs({ session: 'j' })}`)).body).toEqual([expect.objectContaining({ jobId: id, status: 'exited', exitCode: 3 })]);
    // Reading again from 0 gives the whole output (it lives in the sandbox).
    const again = await api.get(`/v1/jobs/${id}${qs({ session: 'j', offset: 0 })}`);
    expect(again.body.output).toBe(output);
    await server.stop();
  }, 90_000);

  it('kill ends only that job\'s process tree (also what escaped with setsid); another job and the shell survive', async () => {
    const t = reg.track();
    const { server, api } = await serve(t);
    const a = await api.post('/v1/jobs', { session: 'k', command: 'sleep 1001 & setsid sleep 1002 & sh -c "sleep 1003"' });
    const b = await api.post('/v1/jobs', { session: 'k', command: 'sleep 1004 & sleep 1005' });
    expect([a.status, b.status]).toEqual([201, 201]);
    const count = async (re: string) => Number((await api.post('/v1/exec', { session: 'k', command: countProcs(re) })).body.stdout);
    expect(await waitFor(async () => (await count('^sleep 100[1-5] $')) === 5, 10_000)).toBe(true);

    const killed = await api.delete(`/v1/jobs/${a.body.jobId}${qs({ session: 'k' })}`);
    expect(killed.body).toEqual({ killed: true });
    expect(await waitFor(async () => (await count('^sleep 100[123] $')) === 0, 5_000)).toBe(true);
    expect(await count('^sleep 100[45] $')).toBe(2);

    const ra = await api.get(`/v1/jobs/${a.body.jobId}${qs({ session: 'k' })}`);
    expect(ra.body).toMatchObject({ status: 'killed', exitCode: null, done: true });
    const rb = await api.get(`/v1/jobs/${b.body.jobId}${qs({ session: 'k' })}`);
    expect(rb.body).toMatchObject({ status: 'running', exitCode: null, done: false });
    expect((await api.delete(`/v1/jobs/${a.body.jobId}${qs({ session: 'k' })}`)).body).toEqual({ killed: false });
    expect((await api.post('/v1/exec', { session: 'k', command: 'echo shell-ok' })).body.stdout).toBe('shell-ok\n');
    await server.stop();
  }, 90_000);

  it('a job whose sandbox vanished says unknown, with no invented exit code', async () => {
    const t = reg.track();
    const broker = await t.open(dockerConfig({ persistent: false }));
    const s = { session: 'gone' };
    const { jobId } = await broker.jobs.start(s, 'sleep 600');
    expect((await broker.jobs.read(s, jobId)).status).toBe('running');
    const c = await containerFor(t.installation, 'session:gone');
    await docker.getContainer(c.id).remove({ force: true });
    const r = await broker.jobs.read(s, jobId);
    expect(r).toEqual({ output: '', nextOffset: 0, done: true, exitCode: null, status: 'unknown' });
    expect(await broker.jobs.list(s)).toEqual([expect.objectContaining({ jobId, status: 'unknown', exitCode: null })]);
    expect(await broker.jobs.kill(s, jobId)).toEqual({ killed: false });
  }, 60_000);

  it('a running job counts as activity: the idle reaper leaves its sandbox alone until it ends', async () => {
    const t = reg.track();
    const broker = await t.open(dockerConfig({ persistent: false, lifecycle: { idleSeconds: 12 } }));
    const s = { session: 'busy' };
    const { jobId } = await broker.jobs.start(s, 'sleep 16; echo finished');
    // Idle for longer than idleSeconds, with sweeps every 3 s: the job keeps the sandbox.
    await new Promise((res) => setTimeout(res, 14_000));
    expect(broker.list('local').map((x) => x.sandboxKey)).toEqual(['session:busy']);
    expect(await waitFor(async () => (await broker.jobs.read(s, jobId)).done, 10_000, 500)).toBe(true);
    // The idle time counts from the job's end, not its start: two sweeps later its sandbox and
    // output are still there (it used to go in the first sweep after the end, output and all).
    await new Promise((res) => setTimeout(res, 7_000));
    expect(broker.list('local').map((x) => x.sandboxKey)).toEqual(['session:busy']);
    expect(await broker.jobs.read(s, jobId)).toMatchObject({ output: 'finished\n', exitCode: 0, status: 'exited' });
    // Once it ended and the sandbox stays idle, the reaper removes it.
    expect(await waitFor(() => broker.list('local').length === 0, 20_000, 500)).toBe(true);
    expect(await t.containers()).toEqual([]);
  }, 90_000);
});
