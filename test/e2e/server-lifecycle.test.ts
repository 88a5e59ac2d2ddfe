import { execFile } from 'node:child_process';
import { expect, it } from 'vitest';
import {
  containerFor, containerState, describeContainers, describeDocker, dockerConfigYaml, installs, waitFor, dockerSuiteHooks,
} from '../helpers/docker-e2e.js';
import { createToken, ServeProcess, stopAll } from '../helpers/serve.js';

/*
 * A real `berth serve` killed and restarted. `persistent: false`: session sandboxes are ephemeral,
 * the session-less `default` sandbox is persistent.
 */

const reg = installs('berth-life-');

describeDocker('berth serve: shutdown and restart on the real engine', () => {
  dockerSuiteHooks(reg, stopAll);

  it('kill -9 mid-command, restart: ephemeral sandboxes reaped, the persistent one reattached with its files, no leak', async () => {
    const t = reg.track();
    t.writeConfig(dockerConfigYaml({ persistent: false }));
    const token = await createToken(t, 'crash');
    const first = await ServeProcess.start(t);
    const api = first.client(token);
    expect((await api.post('/v1/exec', { command: 'echo kept > /root/keep.txt' })).status).toBe(200);
    expect((await api.post('/v1/exec', { session: 'e1', command: 'echo gone > /root/x' })).status).toBe(200);
    const job = await api.post('/v1/jobs', { command: 'sleep 600; echo never' });
    expect(job.status).toBe(201);
    const persistent = await containerFor(t.installation, 'default');
    // A command in flight when the server dies.
    const inflight = api.post('/v1/exec', { session: 'e2', command: 'sleep 30' }).catch((e: Error) => e);
    expect(await waitFor(async () => (await t.containers()).length === 3, 20_000)).toBe(true);
    await new Promise((res) => setTimeout(res, 300));
    const killed = await first.stop('SIGKILL');
    expect(killed.signal).toBe('SIGKILL');
    expect(await inflight).toBeInstanceOf(Error);
    expect((await t.containers()).length, describeContainers(await t.containers())).toBe(3);

    const second = await ServeProcess.start(t);
    // Start-up reaped the sessions of the dead server: only the persistent sandbox is left.
    const left = await t.containers();
    expect(left.map((c) => c.labels['berth.key']), describeContainers(left)).toEqual(['default']);
    expect(left[0]?.id).toBe(persistent.id);
    expect(second.stderr).toMatch(/removed 2 orphaned sandbox/);
    const api2 = second.client(token);
    const list = (await api2.get('/v1/sandboxes')).body as { sandboxKey: string }[];
    expect(list.map((s) => s.sandboxKey)).toEqual(['default']);
    // Reattached, with its files, and its background job still running (it lives in the sandbox).
    const r = await api2.post('/v1/exec', { command: 'cat /root/keep.txt' });
    expect(r.body.stdout).toBe('kept\n');
    expect((await containerFor(t.installation, 'default')).id).toBe(persistent.id);
    const jr = await api2.get(`/v1/jobs/${job.body.jobId}`);
    expect(jr.body).toMatchObject({ status: 'running', exitCode: null });
    // A new session works as before.
    expect((await api2.post('/v1/exec', { session: 'e1', command: 'cat /root/x 2>/dev/null || echo fresh' })).body.stdout).toBe('fresh\n');
    expect((await second.stop()).code).toBe(0);
  }, 120_000);

  it('SIGTERM: in-flight calls finish, new ones are refused, ephemeral sandboxes removed, persistent kept, exit 0', async () => {
    const t = reg.track();
    t.writeConfig(dockerConfigYaml({ persistent: false }));
    const token = await createToken(t, 'term');
    const server = await ServeProcess.start(t, ['--grace', '20']);
    const api = server.client(token);
    expect((await api.post('/v1/exec', { command: 'echo kept > /root/keep.txt' })).status).toBe(200);
    expect((await api.post('/v1/exec', { session: 'a', command: 'true' })).status).toBe(200);
    expect((await api.post('/v1/exec', { session: 'b', command: 'true' })).status).toBe(200);
    const persistent = await containerFor(t.installation, 'default');
    expect((await t.containers()).length).toBe(3);

    const started = Date.now();
    const inflight = api.post('/v1/exec', { session: 'a', command: 'touch /tmp/inflight; sleep 3; echo finished' });
    // The command is running in its sandbox (not merely sent) when the server is told to stop.
    const inA = await containerFor(t.installation, 'session:a');
    const running = (): Promise<boolean> => new Promise((resolve) => {
      execFile('docker', ['exec', inA.id, 'test', '-e', '/tmp/inflight'], (err) => resolve(err === null));
    });
    expect(await waitFor(running, 20_000, 50)).toBe(true);
    const exit = server.stop('SIGTERM');
    await new Promise((res) => setTimeout(res, 200));
    const late = await api.post('/v1/exec', { session: 'c', command: 'echo too-late' }).catch((e: Error) => e);
    if (!(late instanceof Error)) expect(late.status).toBe(503);
    const done = await inflight;
    expect(done.status).toBe(200);
    expect(done.body.stdout).toBe('finished\n');
    expect(Date.now() - started).toBeGreaterThanOrEqual(3_000);
    expect(await exit).toEqual({ code: 0, signal: null });
    expect(server.stderr).toMatch(/SIGTERM/);

    const left = await t.containers();
    expect(left.map((c) => c.labels['berth.key']), describeContainers(left)).toEqual(['default']);
    expect(left[0]?.id).toBe(persistent.id);
    expect(await containerState(persistent.id)).toBeDefined();

    // A later server picks the persistent sandbox up again.
    const again = await ServeProcess.start(t);
    expect((await again.client(token).post('/v1/exec', { command: 'cat /root/keep.txt' })).body.stdout).toBe('kept\n');
    expect((await again.stop()).code).toBe(0);
  }, 120_000);
});
