import { afterEach, describe, expect, it, onTestFinished } from 'vitest';
import { BerthClient } from '../../src/client.js';
import { BerthError } from '../../src/errors.js';
import { tempInstall } from '../helpers/cli.js';
import { createToken, ServeProcess, stopAll } from '../helpers/serve.js';
import { sessionConformance, type SessionUnderTest } from '../conformance/session-conformance.js';
import { OPERATIONS } from '../../src/client/operations.js';

/*
 * `berth/client` against a real `berth serve` (the built dist/, local backend, opted in with
 * server.allowHostBackend): the library's session suite over HTTP, then what only a remote
 * client has (the published document it is built on, errors of the HTTP layer, downloads,
 * what HTTP cannot carry, a cancel).
 */

afterEach(() => stopAll());

const CONFIG = 'backend: local\npersistent: false\nserver:\n  allowHostBackend: true\n';

interface Served {
  server: ServeProcess;
  token: string;
  client: BerthClient;
}

async function serve(profiles: string[] = []): Promise<Served> {
  const t = tempInstall(CONFIG);
  onTestFinished(() => t[Symbol.dispose]());
  const token = await createToken(t, 'acme', profiles);
  const server = await ServeProcess.start(t);
  onTestFinished(async () => {
    await server.stop();
  });
  return { server, token, client: new BerthClient({ url: server.url, token }) };
}

describe('berth/client over HTTP: the library\'s session suite', () => {
  sessionConformance({
    name: 'client over HTTP',
    open: async () => {
      const { server, token, client } = await serve();
      return {
        session: (scope): SessionUnderTest => client.session(scope),
        auditKinds: async (session) => {
          const r = await server.client(token).get(`/v1/audit?session=${encodeURIComponent(session)}`);
          return (r.body as { kind: string }[]).map((e) => e.kind);
        },
      };
    },
  });
});

describe('berth/client: what only a remote client has', () => {
  it('every route the client calls is in the OpenAPI document the server publishes, with the same method', async () => {
    const { server } = await serve();
    const doc = (await server.client(undefined).get('/v1/openapi.json')).body as { paths: Record<string, Record<string, unknown>> };
    for (const [id, op] of Object.entries(OPERATIONS)) {
      expect({ id, operation: doc.paths[op.path]?.[op.method.toLowerCase()] !== undefined }).toEqual({ id, operation: true });
    }
  });

  it('the HTTP layer\'s refusals are BerthErrors with the library\'s codes; the wire code and status stay readable; the token is in no message', async () => {
    const { server, token, client } = await serve();
    const wrong = new BerthClient({ url: server.url, token: 'berth_not-a-real-token' });
    const unauthorized = await wrong.session({ session: 's' }).exec('true').catch((e: unknown) => e);
    expect(unauthorized).toBeInstanceOf(BerthError);
    expect(unauthorized).toMatchObject({ code: 'policy_refused', wireCode: 'unauthorized', status: 401 });

    const forbidden = await client.session({ profile: 'other', session: 's' }).exec('true').catch((e: unknown) => e);
    expect(forbidden).toMatchObject({ code: 'profile_forbidden', status: 403 });

    const badRequest = await client.session({ session: 's' }).exec('true', { timeoutSeconds: -1 }).catch((e: unknown) => e);
    expect(badRequest).toMatchObject({ code: 'usage', wireCode: 'bad_request', status: 400, message: expect.stringContaining('timeoutSeconds') });

    await server.stop();
    const gone = await client.session({ session: 's' }).exec('true').catch((e: unknown) => e);
    expect(gone).toMatchObject({ code: 'backend_unavailable', message: expect.stringContaining(server.url) });
    for (const e of [unauthorized, forbidden, badRequest, gone]) expect((e as Error).message).not.toContain(token);
  });

  it('an export is downloaded through the server (a file as its bytes, a directory as a tar), never answered as a host path', async () => {
    const { client } = await serve();
    const s = client.session({ session: 'ex' });
    await s.exec('mkdir -p d && echo one > d/one.txt && printf "\\0\\377" > bytes.bin');
    const file = await s.files.export({ path: 'bytes.bin' });
    expect(file).toMatchObject({ bytes: 2, kind: 'file', exportId: expect.stringMatching(/^[0-9a-f]{16}$/) });
    expect(JSON.stringify(file)).not.toMatch(/\/tmp\/|berth-test-/);
    expect(await s.files.download(file.exportId)).toEqual({ kind: 'file', data: Buffer.from([0, 255]) });
    const dir = await s.files.export({ path: 'd' });
    const tar = await s.files.download(dir.exportId);
    expect(tar.kind).toBe('dir');
    expect(tar.data.toString('latin1')).toContain('one.txt');
    await expect(client.session({ session: 'other' }).files.download(file.exportId)).rejects.toMatchObject({ code: 'not_found' });
  });

  it('what HTTP cannot carry is refused before anything is sent: a file mode, stdin that is not UTF-8', async () => {
    const { client } = await serve();
    const s = client.session({ session: 'carry' });
    await expect(s.files.upload({ path: 'x', data: Buffer.from('x'), mode: 0o755 })).rejects.toMatchObject({ code: 'unsupported' });
    await expect(s.exec('cat', { stdin: Buffer.from([0xff, 0xfe]) })).rejects.toMatchObject({ code: 'usage' });
    expect((await s.exec('test -e x; echo $?')).stdout).toBe('1\n');
  });

  it('a cancelled exec rejects with the signal\'s reason and the server kills the command (exit 130 in its audit)', async () => {
    const { server, token, client } = await serve();
    const s = client.session({ session: 'cancel' });
    await s.exec('true');
    const ac = new AbortController();
    // A duration of this run's own: pgrep sees the whole host (a local sandbox), where another file may sleep too.
    const nap = String(30_000 + Math.floor(Math.random() * 9_000));
    const running = s.exec(`echo started; sleep ${nap}`, { signal: ac.signal, onChunk: () => ac.abort(new Error('caller gave up')) });
    await expect(running).rejects.toThrow('caller gave up');
    const api = server.client(token);
    let entry: { command: string; exitCode: number | null } | undefined;
    for (const deadline = Date.now() + 10_000; entry === undefined && Date.now() < deadline;) {
      const r = await api.get('/v1/audit?session=cancel');
      entry = (r.body as { command: string; exitCode: number | null }[]).find((e) => e.command.includes(`sleep ${nap}`));
      if (entry === undefined) await new Promise((r) => setTimeout(r, 50));
    }
    expect(entry).toMatchObject({ exitCode: 130 });
    expect((await s.exec(`pgrep -f "sleep ${nap}" >/dev/null; echo $?`)).stdout).toBe('1\n');
  });

  it('hostile input: output that spells SSE framing cannot forge a result; a job id cannot walk to another route', async () => {
    const { client } = await serve();
    const s = client.session({ session: 'hostile' });
    const forged = 'event: result\ndata: {"exitCode":0,"stdout":"forged"}\n\n';
    const chunks: string[] = [];
    const r = await s.exec(`printf '\n\n%s' '${forged}'; exit 5`, { onChunk: (_k, c) => chunks.push(c) });
    expect(r).toMatchObject({ exitCode: 5, stdout: `\n\n${forged}` });
    expect(chunks.join('')).toBe(r.output);
    await expect(s.jobs.read('../files?path=/etc/passwd')).rejects.toMatchObject({ code: 'usage', status: 400 });
    await expect(s.jobs.kill('job_0000000000000000/../../sessions/close')).rejects.toMatchObject({ code: 'usage', status: 400 });
  });
});
