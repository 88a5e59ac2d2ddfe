import { expect, it } from 'vitest';
import { describeContainers, describeDocker, dockerConfigYaml, dockerSuiteHooks, installs } from '../helpers/docker-e2e.js';
import { createToken, ServeProcess, stopAll } from '../helpers/serve.js';

/*
 * `POST /v1/sessions/close` racing a session's first exec. A close always removes
 * the session's ephemeral sandbox; an exec that was already running when the close came never
 * leaves its container behind after the close returned.
 */

const reg = installs('berth-close-race-');

describeDocker('berth serve: a session close racing its first exec (docker)', () => {
  dockerSuiteHooks(reg, stopAll);

  it('close sent right after the first exec was sent (the container is still being created): removed, nothing left', async () => {
    const t = reg.track();
    t.writeConfig(dockerConfigYaml({ persistent: false }));
    const token = await createToken(t, 'race');
    const server = await ServeProcess.start(t);
    const api = server.client(token);
    const exec = api.post('/v1/exec', { session: 's1', command: 'echo hi' });
    // The exec's sandbox is being created (its claim is recorded, no container answered yet).
    await new Promise((r) => setTimeout(r, 150));
    const close = await api.post('/v1/sessions/close', { session: 's1' });
    expect(close.status).toBe(200);
    expect(close.body).toEqual({ removed: ['session:s1'], kept: [], wasOpen: true });
    // The exec was overtaken while its sandbox was being created: it says so (or, on an engine
    // fast enough to finish first, it ran before the close).
    const r = await exec;
    if (r.status !== 200) expect(r, JSON.stringify(r.body)).toMatchObject({ status: 409, body: { error: { code: 'session_closed' } } });
    const left = await t.containers();
    expect(left, describeContainers(left)).toEqual([]);
    const list = (await api.get('/v1/sandboxes')).body as unknown[];
    expect(list).toEqual([]);
  }, 60_000);

  it('close right after the first exec answered: removed', async () => {
    const t = reg.track();
    t.writeConfig(dockerConfigYaml({ persistent: false }));
    const token = await createToken(t, 'after');
    const server = await ServeProcess.start(t);
    const api = server.client(token);
    expect((await api.post('/v1/exec', { session: 's1', command: 'echo hi' })).body.stdout).toBe('hi\n');
    const close = await api.post('/v1/sessions/close', { session: 's1' });
    expect(close.body).toEqual({ removed: ['session:s1'], kept: [], wasOpen: true });
    const left = await t.containers();
    expect(left, describeContainers(left)).toEqual([]);
  }, 60_000);

  it('close while the first exec runs a command: the command ends, the container goes and does not come back', async () => {
    const t = reg.track();
    t.writeConfig(dockerConfigYaml({ persistent: false }));
    const token = await createToken(t, 'running');
    const server = await ServeProcess.start(t);
    const api = server.client(token);
    const res = await fetch(`${server.url}/v1/exec/stream`, {
      method: 'POST', headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ session: 's1', command: 'echo started; sleep 20; echo done' }),
    });
    const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
    let text = '';
    while (!text.includes('started')) {
      const { value, done } = await reader.read();
      if (done) break;
      text += value;
    }
    expect(text).toContain('started');
    const close = await api.post('/v1/sessions/close', { session: 's1' });
    expect(close.body).toEqual({ removed: ['session:s1'], kept: [], wasOpen: true });
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      text += value;
    }
    expect(text).not.toContain('done');
    expect(text).toMatch(/event: (result|error)/);
    await new Promise((r) => setTimeout(r, 1_000));
    const left = await t.containers();
    expect(left, describeContainers(left)).toEqual([]);
  }, 60_000);

  it('many closes racing many first execs: every close removes what its exec created', async () => {
    const t = reg.track();
    t.writeConfig(dockerConfigYaml({ persistent: false }));
    const token = await createToken(t, 'many');
    const server = await ServeProcess.start(t);
    const api = server.client(token);
    const rounds = [0, 50, 200, 400, 800];
    await Promise.all(rounds.map(async (delay, i) => {
      const exec = api.post('/v1/exec', { session: `m${i}`, command: 'echo hi' });
      await new Promise((r) => setTimeout(r, delay));
      const close = await api.post('/v1/sessions/close', { session: `m${i}` });
      expect(close.status).toBe(200);
      await exec;
    }));
    const left = await t.containers();
    expect(left, describeContainers(left)).toEqual([]);
  }, 90_000);
});
