import { createHash, randomBytes } from 'node:crypto';
import { request, type ClientRequest } from 'node:http';
import { describe, expect, it } from 'vitest';
import { tempInstall } from '../helpers/cli.js';
import { describeDocker, docker, dockerConfigYaml, dockerSuiteHooks, installs, waitFor } from '../helpers/docker-e2e.js';
import { createToken, qs, ServeProcess, stopAll, type ApiClient, type ServeInstall } from '../helpers/serve.js';

/*
 * Through a real `berth serve`: uploads are streamed into the sandbox (byte-exact,
 * nothing left behind when one fails) and one tenant cannot take the server's memory or its call
 * slots: past `limits.concurrentCalls` or `limits.uploadBytesInFlight` its calls get 429, while
 * another tenant's calls go through. The server's memory under load is measured by the bench.
 */

const sha = (b: Buffer): string => createHash('sha256').update(b).digest('hex');

interface Answer {
  status: number;
  body: any; // eslint-disable-line @typescript-eslint/no-explicit-any
}

function answerOf(req: ClientRequest): Promise<Answer> {
  return new Promise((resolve, reject) => {
    req.on('response', (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8');
        let body: unknown = text;
        try {
          body = JSON.parse(text);
        } catch {
          // not JSON
        }
        resolve({ status: res.statusCode ?? 0, body });
      });
    });
    req.on('error', reject);
  });
}

/** PUT /v1/files with a body whose first `head` bytes go now and the rest on `finish()`; `abort()` hangs up. */
function putInParts(server: ServeProcess, token: string, query: Record<string, string>, data: Buffer, head: number): {
  answer: Promise<Answer>; finish(): void; abort(): void;
} {
  const req = request(`${server.url}/v1/files${qs(query)}`, {
    method: 'PUT', headers: { authorization: `Bearer ${token}`, 'content-length': data.length },
  });
  const answer = answerOf(req);
  req.write(data.subarray(0, head));
  return { answer, finish: () => req.end(data.subarray(head)), abort: () => req.destroy() };
}

function put(server: ServeProcess, token: string, query: Record<string, string>, data: Buffer): Promise<Answer> {
  const p = putInParts(server, token, query, data, data.length);
  p.finish();
  return p.answer;
}

/** POST /v1/exec/stream whose command printed `started`: the call is running on the server. */
async function runningExec(server: ServeProcess, token: string, body: Record<string, unknown>): Promise<{ rest: Promise<string> }> {
  const res = await fetch(`${server.url}/v1/exec/stream`, {
    method: 'POST', headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' }, body: JSON.stringify(body),
  });
  expect(res.status).toBe(200);
  const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
  let text = '';
  while (!text.includes('started')) {
    const { value, done } = await reader.read();
    if (done) throw new Error(`the stream ended before "started": ${text}`);
    text += value;
  }
  const rest = (async () => {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return text;
      text += value;
    }
  })();
  return { rest };
}

/** Temp files of unfinished uploads under the sandbox's /workspace (as the session's own shell sees it). */
async function partials(api: ApiClient, session: string): Promise<string> {
  const r = await api.post('/v1/exec', { session, command: 'find /workspace -name ".berth-upload-*"' });
  expect(r.status, JSON.stringify(r.body)).toBe(200);
  return r.body.stdout as string;
}

async function serve(t: ServeInstall & { writeConfig(yaml: string): void }, config: string, tenants: string[]): Promise<{ server: ServeProcess; tokens: string[] }> {
  t.writeConfig(config);
  const tokens: string[] = [];
  for (const tenant of tenants) tokens.push(await createToken(t, tenant));
  return { server: await ServeProcess.start(t), tokens };
}

const reg = installs('berth-uploads-');

describeDocker('berth serve: streamed uploads and per-tenant limits (docker)', () => {
  dockerSuiteHooks(reg, stopAll);

  it('a 60 MB upload lands byte-exact; without Content-Length 411; over files.maxBytes 413 before the body is read', async () => {
    const t = reg.track();
    const { server, tokens: [token] } = await serve(t, dockerConfigYaml({ persistent: false, files: { maxBytes: 64 * 1024 * 1024 } }), ['acme']);
    const api = server.client(token!);
    const data = randomBytes(60 * 1000 * 1000);
    const r = await put(server, token!, { session: 'big', path: '/workspace/in/big.bin' }, data);
    expect(r, JSON.stringify(r.body)).toEqual({ status: 201, body: { path: '/workspace/in/big.bin', bytes: data.length } });
    const inside = await api.post('/v1/exec', { session: 'big', command: 'sha256sum /workspace/in/big.bin; ls -a /workspace/in' });
    expect(inside.body.stdout).toBe(`${sha(data)}  /workspace/in/big.bin\n.\n..\nbig.bin\n`);

    const chunked = request(`${server.url}/v1/files${qs({ session: 'big', path: '/workspace/c.txt' })}`, {
      method: 'PUT', headers: { authorization: `Bearer ${token}`, 'transfer-encoding': 'chunked' },
    });
    const noLength = answerOf(chunked);
    chunked.end('some bytes');
    expect(await noLength).toEqual({ status: 411, body: { error: {
      code: 'length_required',
      message: 'PUT /v1/files needs a Content-Length header: the body is streamed into the sandbox as it arrives and its size must be known first; ' +
        'send the file with its length (curl -T FILE or --data-binary @FILE), not chunked',
    } } });

    // Only the headers are sent: the refusal comes from the declared length alone.
    const huge = request(`${server.url}/v1/files${qs({ session: 'big', path: '/workspace/huge.bin' })}`, {
      method: 'PUT', headers: { authorization: `Bearer ${token}`, 'content-length': 65 * 1024 * 1024 },
    });
    const tooLarge = answerOf(huge);
    huge.flushHeaders();
    expect(await tooLarge).toMatchObject({ status: 413, body: { error: { code: 'too_large', message: expect.stringMatching(/files\.maxBytes/) } } });
    huge.destroy();
    expect(await partials(api, 'big')).toBe('');
  }, 180_000);

  it('past limits.concurrentCalls a tenant gets 429 too_many_calls; another tenant\'s call goes through', async () => {
    const t = reg.track();
    const { server, tokens: [a, b] } = await serve(t, dockerConfigYaml({ persistent: false, limits: { concurrentCalls: 2 } }), ['acme', 'other']);
    const apiA = server.client(a!);
    const apiB = server.client(b!);
    // Two calls held running until the test lets them go (a file it creates through the engine).
    const held = 'echo started; until [ -e /tmp/go ]; do sleep 0.1; done; echo released';
    const first = await runningExec(server, a!, { session: 's1', command: held });
    const second = await runningExec(server, a!, { session: 's2', command: held });
    const third = await apiA.post('/v1/exec', { session: 's3', command: 'echo three' });
    expect(third).toMatchObject({ status: 429, body: { error: {
      code: 'too_many_calls',
      message: 'this tenant already has 2 calls running, its limit (limits.concurrentCalls = 2); retry when one has finished, or raise limits.concurrentCalls in the config',
    } } });
    expect(third.headers.get('retry-after')).toBe('1');
    expect((await put(server, a!, { session: 's3', path: '/workspace/x' }, Buffer.from('x'))).body).toMatchObject({ error: { code: 'too_many_calls' } });
    const other = await apiB.post('/v1/exec', { session: 's1', command: 'echo other' });
    expect(other.status, JSON.stringify(other.body)).toBe(200);
    expect(other.body.stdout).toBe('other\n');
    const heldIn = (await t.containers()).filter((c) => c.labels['berth.tenant'] === 'acme');
    expect(heldIn.map((c) => c.labels['berth.key']).sort()).toEqual(['session:s1', 'session:s2']);
    for (const c of heldIn) {
      const exec = await docker.getContainer(c.id).exec({ Cmd: ['touch', '/tmp/go'] });
      await exec.start({ Detach: true });
    }
    expect(await first.rest).toContain('released');
    expect(await second.rest).toContain('released');
    // Their slots are free again once their answers are out.
    expect(await waitFor(async () => (await apiA.post('/v1/exec', { session: 's3', command: 'true' })).status === 200, 20_000)).toBe(true);
  }, 180_000);

  it('past limits.uploadBytesInFlight a tenant\'s upload gets 429 too_many_bytes; another tenant uploads; the first lands', async () => {
    const t = reg.track();
    const MiB = 1024 * 1024;
    const { server, tokens: [a, b] } = await serve(t, dockerConfigYaml({ persistent: false, limits: { uploadBytesInFlight: 4 * MiB } }), ['acme', 'other']);
    const apiA = server.client(a!);
    const data = randomBytes(3 * MiB);
    const slow = putInParts(server, a!, { session: 'u', path: '/workspace/slow.bin' }, data, MiB);
    // In flight for sure: its temp file is in the sandbox, filling.
    expect(await waitFor(async () => (await partials(apiA, 'u')) !== '', 60_000, 300)).toBe(true);
    const over = await put(server, a!, { session: 'u', path: '/workspace/second.bin' }, randomBytes(2 * MiB));
    expect(over).toEqual({ status: 429, body: { error: {
      code: 'too_many_bytes',
      message: `this tenant has ${3 * MiB} upload bytes in flight and ${2 * MiB} more would pass its limit (limits.uploadBytesInFlight = ${4 * MiB}); ` +
        'retry when an upload has finished, or raise limits.uploadBytesInFlight in the config',
    } } });
    const otherData = randomBytes(2 * MiB);
    const other = await put(server, b!, { session: 'u', path: '/workspace/b.bin' }, otherData);
    expect(other.status, JSON.stringify(other.body)).toBe(201);
    const alone = await put(server, b!, { session: 'u', path: '/workspace/huge.bin' }, randomBytes(5 * MiB));
    expect(alone).toMatchObject({ status: 429, body: { error: { code: 'too_many_bytes', message: expect.stringMatching(/^an upload of 5242880 bytes is more than this tenant may have in flight/) } } });
    slow.finish();
    expect(await slow.answer).toEqual({ status: 201, body: { path: '/workspace/slow.bin', bytes: data.length } });
    const inside = await apiA.post('/v1/exec', { session: 'u', command: 'sha256sum /workspace/slow.bin | cut -d" " -f1' });
    expect(inside.body.stdout).toBe(`${sha(data)}\n`);
    // Its bytes are released: the second upload fits now.
    expect((await put(server, a!, { session: 'u', path: '/workspace/second.bin' }, randomBytes(2 * MiB))).status).toBe(201);
  }, 180_000);

  it('a client that hangs up mid-upload leaves nothing behind, and the file it would have replaced is intact', async () => {
    const t = reg.track();
    const { server, tokens: [token] } = await serve(t, dockerConfigYaml({ persistent: false }), ['acme']);
    const api = server.client(token!);
    expect((await put(server, token!, { session: 'h', path: '/workspace/keep.txt' }, Buffer.from('old\n'))).status).toBe(201);
    const cut = putInParts(server, token!, { session: 'h', path: '/workspace/new/keep.txt' }, randomBytes(4 * 1024 * 1024), 1024 * 1024);
    const over = putInParts(server, token!, { session: 'h', path: '/workspace/keep.txt' }, randomBytes(4 * 1024 * 1024), 1024 * 1024);
    cut.answer.catch(() => undefined);
    over.answer.catch(() => undefined);
    // Both in flight: their temp files are in the sandbox, filling (one in a dir the upload created).
    expect(await waitFor(async () => (await partials(api, 'h')).trim().split('\n').length === 2, 60_000, 300)).toBe(true);
    cut.abort();
    over.abort();
    expect(await waitFor(async () => (await partials(api, 'h')) === '', 30_000, 300)).toBe(true);
    const r = await api.post('/v1/exec', { session: 'h', command: 'cat /workspace/keep.txt; ls -a /workspace' });
    expect(r.body.stdout).toBe('old\n.\n..\nkeep.txt\n');
  }, 180_000);
});

describe('berth serve: a streamed upload on the local backend', () => {
  it('a 60 MB upload lands byte-exact', async () => {
    using t = tempInstall('backend: local\npersistent: false\nserver:\n  allowHostBackend: true\n');
    const token = await createToken(t, 'acme');
    const server = await ServeProcess.start(t);
    try {
      const data = randomBytes(60 * 1000 * 1000);
      const r = await put(server, token, { session: 'big', path: 'big.bin' }, data);
      expect(r.status, JSON.stringify(r.body)).toBe(201);
      expect(r.body.bytes).toBe(data.length);
      const inside = await server.client(token).post('/v1/exec', { session: 'big', command: `sha256sum ${JSON.stringify(r.body.path)} | cut -d" " -f1; ls -a | grep -c berth-upload` });
      expect(inside.body.stdout).toBe(`${sha(data)}\n0\n`);
    } finally {
      await server.stop();
    }
  }, 120_000);
});

