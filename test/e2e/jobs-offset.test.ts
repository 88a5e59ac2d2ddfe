import { describe, expect, it } from 'vitest';
import { Broker } from '../../src/broker/broker.js';
import { parseConfig } from '../../src/setup/parse-config.js';
import { isBerthError } from '../../src/errors.js';
import type { CallScopeInput } from '../../src/scope/call-scope.js';
import { describeDocker, dockerConfigYaml, dockerSuiteHooks, installs } from '../helpers/docker-e2e.js';
import { call, httpConn, startHttpMcp } from '../helpers/mcp-clients.js';
import { createToken, qs, ServeProcess, stopAll } from '../helpers/serve.js';
import { tempDir } from '../helpers/temp-dir.js';

/*
 * Reading a job from an offset past the end of its output is an
 * error naming the current size (400 offset_out_of_range over HTTP, an isError result over MCP),
 * never an answer that pretends the offset was valid.
 */

async function waitDone(broker: Broker, scope: CallScopeInput, jobId: string): Promise<void> {
  const deadline = Date.now() + 15_000;
  while ((await broker.jobs.read(scope, jobId, { maxBytes: 0 })).status === 'running') {
    if (Date.now() > deadline) throw new Error(`job ${jobId} did not end`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

describe('job reads past the end (local backend)', () => {
  it('library: an offset past the output is offset_out_of_range naming the size; the end itself reads as empty', async () => {
    await using broker = await Broker.open({
      config: parseConfig({ backend: 'local', persistent: false }), berthHome: tempDir('berth-joboff-'), env: { PATH: process.env['PATH'] },
    });
    const scope = { session: 'j' };
    const { jobId } = await broker.jobs.start(scope, 'printf 0123456789');
    await waitDone(broker, scope, jobId);
    const atEnd = await broker.jobs.read(scope, jobId, { offset: 10 });
    expect(atEnd).toMatchObject({ output: '', nextOffset: 10, done: true, status: 'exited', exitCode: 0 });
    const err = await broker.jobs.read(scope, jobId, { offset: 11 }).catch((e: unknown) => e);
    expect(isBerthError(err) && err.code, String(err)).toBe('offset_out_of_range');
    expect((err as Error).message).toBe(
      `offset 11 is past the end of job ${jobId}'s output (10 bytes so far); read from an offset up to 10, e.g. the nextOffset of the previous read`);
    await expect(broker.jobs.read(scope, jobId, { offset: 1_000_000, maxBytes: 0 })).rejects.toThrow(/past the end/);
  });

  it('MCP process read: an offset past the output is an error result naming the size', async () => {
    await using broker = await Broker.open({
      config: parseConfig({ backend: 'local', persistent: false, server: { allowHostBackend: true } }), berthHome: tempDir('berth-joboff-mcp-'), env: { PATH: process.env['PATH'] },
    });
    const mcp = await startHttpMcp(broker);
    const conn = await httpConn(mcp.url, 'acme');
    try {
      const job = await call(conn, 'terminal', { command: 'printf abc', background: true });
      const jobId = job.structured['jobId'] as string;
      let done = false;
      for (let i = 0; i < 150 && !done; i++) {
        done = (await call(conn, 'process', { action: 'read', jobId })).structured['done'] === true;
        if (!done) await new Promise((r) => setTimeout(r, 100));
      }
      expect(done).toBe(true);
      const past = await call(conn, 'process', { action: 'read', jobId, offset: 4 });
      expect(past.isError).toBe(true);
      expect(past.structured).toEqual({ error: { code: 'offset_out_of_range', message: expect.stringMatching(/^offset 4 is past the end of job job_[0-9a-f]{16}'s output \(3 bytes so far\)/) } });
      const end = await call(conn, 'process', { action: 'read', jobId, offset: 3 });
      expect(end.isError).toBe(false);
      expect(end.structured).toMatchObject({ nextOffset: 3, done: true });
    } finally {
      await conn.close();
      await mcp.close();
    }
  });
});

const reg = installs('berth-joboff-');

describeDocker('job reads past the end over HTTP (docker)', () => {
  dockerSuiteHooks(reg, stopAll);

  it('GET /v1/jobs/:id?offset past the output is 400 offset_out_of_range naming the size; a running job too', async () => {
    const t = reg.track();
    t.writeConfig(dockerConfigYaml({ persistent: false }));
    const token = await createToken(t, 'jobs');
    const server = await ServeProcess.start(t);
    const api = server.client(token);
    const start = await api.post('/v1/jobs', { session: 'j', command: 'printf hello; sleep 30' });
    expect(start.status, JSON.stringify(start.body)).toBe(201);
    const id = start.body.jobId as string;
    let read = await api.get(`/v1/jobs/${id}${qs({ session: 'j' })}`);
    for (let i = 0; i < 100 && read.body.nextOffset !== 5; i++) {
      await new Promise((r) => setTimeout(r, 100));
      read = await api.get(`/v1/jobs/${id}${qs({ session: 'j' })}`);
    }
    expect(read.body).toMatchObject({ output: 'hello', nextOffset: 5, done: false, status: 'running' });
    const past = await api.get(`/v1/jobs/${id}${qs({ session: 'j', offset: 9 })}`);
    expect(past.status).toBe(400);
    expect(past.body).toEqual({ error: {
      code: 'offset_out_of_range',
      message: `offset 9 is past the end of job ${id}'s output (5 bytes so far); read from an offset up to 5, e.g. the nextOffset of the previous read`,
    } });
    const atEnd = await api.get(`/v1/jobs/${id}${qs({ session: 'j', offset: 5 })}`);
    expect(atEnd.status).toBe(200);
    expect(atEnd.body).toMatchObject({ output: '', nextOffset: 5, done: false });
    expect((await api.delete(`/v1/jobs/${id}${qs({ session: 'j' })}`)).body).toEqual({ killed: true });
    await server.stop();
  }, 90_000);
});
