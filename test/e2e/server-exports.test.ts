import { mkdirSync, readdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import { Broker } from '../../src/broker/broker.js';
import { parseConfig } from '../../src/setup/parse-config.js';
import { stagingDirFor } from '../../src/files/staging.js';
import { readTar } from '../../src/files/tar.js';
import { runBerth, tempInstall } from '../helpers/cli.js';
import { describeDocker, dockerConfigYaml, dockerSuiteHooks, installs, IMAGE } from '../helpers/docker-e2e.js';
import { call, httpConn } from '../helpers/mcp-clients.js';
import { createToken, qs, ServeProcess, stopAll, type ApiClient } from '../helpers/serve.js';

/*
 * Remote callers never get host paths (docs/design.md §8): an export is handed back as a download route
 * that streams it (a file as its bytes, a folder as a tar), looked up only under the calling
 * scope's own staging dir; mounts are a boolean over HTTP. Through a real `berth serve`, on docker
 * and on local (which the config lets remote callers use, explicitly).
 */

interface Rig {
  home: string;
  dir: string;
  env: NodeJS.ProcessEnv;
  server: ServeProcess;
  acme: ApiClient;
  beta: ApiClient;
}

const reg = installs('berth-exports-');

/** A granted secret the rig's sandboxes hold (`env.forward`), to check what comes back redacted. */
const SECRET = 'ghp_export-secret-0123456789';

async function rig(kind: 'docker' | 'local'): Promise<Rig> {
  let t: { home: string; dir: string; env: NodeJS.ProcessEnv };
  if (kind === 'docker') {
    const d = reg.track();
    d.writeConfig(dockerConfigYaml({ persistent: false, env: { forward: ['GITHUB_TOKEN'] } }));
    t = d;
  } else {
    const l = tempInstall('backend: local\npersistent: false\nenv:\n  forward: [GITHUB_TOKEN]\nserver:\n  allowHostBackend: true\n');
    cleanups.push(() => l[Symbol.dispose]());
    t = l;
  }
  t = { ...t, env: { ...t.env, GITHUB_TOKEN: SECRET } };
  const acmeToken = await createToken(t, 'acme', ['default', 'bot']);
  const betaToken = await createToken(t, 'beta');
  const server = await ServeProcess.start(t);
  return { ...t, server, acme: server.client(acmeToken), beta: server.client(betaToken) };
}

const cleanups: (() => void)[] = [];
afterEach(async () => {
  await stopAll();
  for (const c of cleanups.splice(0)) c();
});

async function download(c: ApiClient, path: string): Promise<{ status: number; type: string | null; data: Buffer }> {
  const res = await fetch(`${c.url}${path}`, { headers: { authorization: `Bearer ${c.token}` } });
  return { status: res.status, type: res.headers.get('content-type'), data: Buffer.from(await res.arrayBuffer()) };
}

async function untar(data: Buffer): Promise<Record<string, string>> {
  const out: Record<string, string> = {};
  await readTar(Readable.from([data]), (h) => {
    if (h.type === 'dir') {
      out[h.name] = '<dir>';
      return undefined;
    }
    const parts: Buffer[] = [];
    return { write: (c) => void parts.push(Buffer.from(c)), end: () => void (out[h.name] = h.type === 'file' ? Buffer.concat(parts).toString() : `<${h.type}>`) };
  });
  return out;
}

function suite(kind: 'docker' | 'local'): void {
  it(`${kind}: export answers a download route, never a host path; the route streams a file's bytes and a folder as a tar`, async () => {
    const r = await rig(kind);
    const scope = { session: 's1', user: 'telegram:1' };
    const made = await r.acme.post('/v1/exec', { ...scope, command: 'mkdir -p out/sub && printf "héllo\\n" > out/a.txt && head -c 3000 /dev/zero | tr "\\0" x > out/sub/b.txt && pwd' });
    expect(made.status, JSON.stringify(made.body)).toBe(200);

    const file = await r.acme.post('/v1/files/export', { ...scope, path: 'out/a.txt' });
    expect(file.status, JSON.stringify(file.body)).toBe(200);
    expect(Object.keys(file.body).sort()).toEqual(['bytes', 'download', 'exportId', 'kind']);
    expect(file.body).toMatchObject({ kind: 'file', bytes: Buffer.byteLength('héllo\n'), exportId: expect.stringMatching(/^[0-9a-f]{16}$/) });
    expect(file.body.download).toBe(`/v1/files/exports/${file.body.exportId}${qs(scope)}`);
    expect(JSON.stringify(file.body)).not.toContain(r.home);
    const got = await download(r.acme, file.body.download);
    expect(got.status).toBe(200);
    expect(got.type).toBe('application/octet-stream');
    expect(got.data.toString()).toBe('héllo\n');

    const dir = await r.acme.post('/v1/files/export', { ...scope, path: 'out' });
    expect(dir.body).toMatchObject({ kind: 'dir', bytes: Buffer.byteLength('héllo\n') + 3000 });
    const tar = await download(r.acme, dir.body.download);
    expect(tar.status).toBe(200);
    expect(tar.type).toBe('application/x-tar');
    expect(await untar(tar.data)).toEqual({ 'out/': '<dir>', 'out/a.txt': 'héllo\n', 'out/sub/': '<dir>', 'out/sub/b.txt': 'x'.repeat(3000) });
  });

  it(`${kind}: a granted secret in a file comes back redacted by every route: read, export and its download (file and folder), MCP read_file and export_file`, async () => {
    const r = await rig(kind);
    const scope = { session: 's1' };
    const made = await r.acme.post('/v1/exec', { ...scope, command: 'mkdir -p out && printf "token=%s\\n" "$GITHUB_TOKEN" > out/t.txt && echo ok' });
    expect(made.body, JSON.stringify(made.body)).toMatchObject({ stdout: 'ok\n' });
    const want = 'token=[REDACTED]\n';
    const read = await download(r.acme, `/v1/files${qs({ ...scope, path: 'out/t.txt' })}`);
    expect(read.data.toString()).toBe(want);
    const file = await r.acme.post('/v1/files/export', { ...scope, path: 'out/t.txt' });
    expect(file.body).toMatchObject({ kind: 'file', bytes: Buffer.byteLength(want) });
    expect((await download(r.acme, file.body.download)).data.toString()).toBe(want);
    const dir = await r.acme.post('/v1/files/export', { ...scope, path: 'out' });
    expect(await untar((await download(r.acme, dir.body.download)).data)).toEqual({ 'out/': '<dir>', 'out/t.txt': want });

    const c = await httpConn(new URL('/mcp', r.server.url), { token: r.acme.token! });
    try {
      await call(c, 'terminal', { command: 'printf "token=%s\\n" "$GITHUB_TOKEN" > m.txt' });
      const mcpRead = await call(c, 'read_file', { path: 'm.txt' });
      expect(mcpRead.text).toContain(want.trim());
      expect(mcpRead.text).not.toContain(SECRET);
      const ex = await call(c, 'export_file', { path: 'm.txt' });
      expect((await download(r.acme, ex.structured['download'] as string)).data.toString()).toBe(want);
    } finally {
      await c.close();
    }
  });

  it(`${kind}: an export id answers only its own tenant, profile, session and user; anything not an id is refused`, async () => {
    const r = await rig(kind);
    const scope = { session: 's1', user: 'telegram:1' };
    await r.acme.post('/v1/exec', { ...scope, command: 'echo mine > mine.txt' });
    const ex = await r.acme.post('/v1/files/export', { ...scope, path: 'mine.txt' });
    const id = ex.body.exportId as string;
    expect((await download(r.acme, `/v1/files/exports/${id}${qs(scope)}`)).status).toBe(200);
    const others: [ApiClient, Record<string, string>][] = [
      [r.beta, scope], [r.acme, { session: 's2', user: 'telegram:1' }], [r.acme, { session: 's1', user: 'telegram:2' }],
      [r.acme, { session: 's1' }], [r.acme, { ...scope, profile: 'bot' }], [r.acme, {}],
    ];
    for (const [client, q] of others) {
      const res = await download(client, `/v1/files/exports/${id}${qs(q)}`);
      expect(res.status, JSON.stringify(q)).toBe(404);
      expect(res.data.toString()).not.toContain('mine');
    }
    for (const bad of ['..', '%2e%2e', '.', id.toUpperCase(), `${id}0`, id.slice(1), 'zzzzzzzzzzzzzzzz', '.partial-abc', '%2fetc', `${id}%2f..`]) {
      const res = await download(r.acme, `/v1/files/exports/${bad}${qs(scope)}`);
      expect([400, 404], `${bad}: ${res.status} ${res.data.toString()}`).toContain(res.status);
    }
  });

  it(`${kind}: the route never follows a symlink out of staging`, async () => {
    const r = await rig(kind);
    const scope = { session: 's1' };
    await r.acme.post('/v1/exec', { ...scope, command: 'mkdir -p d && echo inside > d/f.txt && echo one > one.txt' });
    const one = await r.acme.post('/v1/files/export', { ...scope, path: 'one.txt' });
    const d = await r.acme.post('/v1/files/export', { ...scope, path: 'd' });
    const outside = join(r.dir, 'outside');
    mkdirSync(outside, { recursive: true });
    writeFileSync(join(outside, 'secret.txt'), 'host-secret\n');
    const staging = stagingDirFor(r.home, { tenant: 'acme', profile: 'default', user: undefined, sessionRef: 's1' });

    // An export's dir is `<exportId>-<bytes>` (the staging bound counts it by name).
    const dirOf = (id: string): string => join(staging, readdirSync(staging).find((n) => n.startsWith(`${id}-`)) as string);
    // A planted export dir that is a symlink to a host dir.
    symlinkSync(outside, join(staging, 'aaaaaaaaaaaaaaaa-1'));
    // The exported file replaced by a symlink to a host file.
    const oneDir = dirOf(one.body.exportId as string);
    rmSync(join(oneDir, 'one.txt'));
    symlinkSync(join(outside, 'secret.txt'), join(oneDir, 'one.txt'));
    // A symlink planted inside an exported folder.
    symlinkSync(outside, join(dirOf(d.body.exportId as string), 'd', 'link'));
    expect(readdirSync(staging).map((n) => n.split('-')[0]).sort()).toEqual(['aaaaaaaaaaaaaaaa', one.body.exportId, d.body.exportId].sort());

    for (const id of ['aaaaaaaaaaaaaaaa', one.body.exportId as string]) {
      const res = await download(r.acme, `/v1/files/exports/${id}${qs(scope)}`);
      expect(res.status, res.data.toString()).toBe(404);
      expect(res.data.toString()).not.toContain('host-secret');
    }
    const tar = await download(r.acme, d.body.download as string);
    expect(tar.status).toBe(200);
    expect(tar.data.toString('latin1')).not.toContain('host-secret');
    expect(await untar(tar.data)).toEqual({ 'd/': '<dir>', 'd/f.txt': 'inside\n' });
  });
}

describe('berth serve: exports for remote callers (local backend)', () => {
  suite('local');
});

describeDocker('berth serve: exports and mounts for remote callers (docker)', () => {
  dockerSuiteHooks(reg, stopAll);
  suite('docker');

  it('mounts are a boolean over HTTP (/v1/explain, /v1/sandboxes); the CLI and library keep the real path', async () => {
    const t = reg.track();
    t.writeConfig(dockerConfigYaml({ persistent: false, workspace: { mount: true } }));
    const ws = t.userDir('project');
    const cli = await runBerth(['exec', '--workspace', ws, '--', 'echo hi > /workspace/f'], { env: t.env, cwd: t.dir });
    expect(cli.code, cli.stderr).toBe(0);
    const cliExplain = await runBerth(['explain', '--workspace', ws, '--json'], { env: t.env, cwd: t.dir });
    expect(JSON.parse(cliExplain.stdout)).toMatchObject({ mount: ws, isolation: 'container' });
    const lib = await Broker.open({ config: parseConfig({ backend: 'docker', workspace: { mount: true }, docker: { image: IMAGE } }), berthHome: t.home, env: {} });
    try {
      lib.setTaskOverride({ tenant: 'local', task: 't1' }, { cwd: ws });
      expect(lib.explain({ tenant: 'local', task: 't1' }).mount).toBe(ws);
      expect(lib.list('local').map((s) => s.mount)).toEqual([ws]);
    } finally {
      await lib.close();
    }

    const server = await ServeProcess.start(t);
    const api = server.client(await createToken(t, 'local'));
    const explained = await api.post('/v1/explain', { task: 't1' });
    expect(explained.status, JSON.stringify(explained.body)).toBe(200);
    expect(explained.body).toMatchObject({ mounted: true, isolation: 'container' });
    expect(explained.body).not.toHaveProperty('mount');
    expect(JSON.stringify(explained.body)).not.toContain(ws);
    expect((await api.post('/v1/explain', { session: 'x' })).body).toMatchObject({ mounted: false });
    const listed = await api.get('/v1/sandboxes');
    expect(listed.body).toEqual([expect.objectContaining({ sandboxKey: 'default', mounted: true })]);
    expect(listed.body[0]).not.toHaveProperty('mount');
    expect(JSON.stringify(listed.body)).not.toContain(ws);
  });

  it('MCP export_file over HTTP answers the download route (it works with the same token), not a host path', async () => {
    const t = reg.track();
    t.writeConfig(dockerConfigYaml({ persistent: false }));
    const token = await createToken(t, 'acme');
    const server = await ServeProcess.start(t);
    const c = await httpConn(new URL('/mcp', server.url), { token });
    try {
      await call(c, 'write_file', { path: '/workspace/report.txt', content: 'report\n' });
      const ex = await call(c, 'export_file', { path: '/workspace/report.txt' });
      expect(ex.isError, ex.text).toBe(false);
      expect(ex.structured).not.toHaveProperty('hostPath');
      expect(ex.text).not.toContain(t.home);
      const route = ex.structured['download'] as string;
      expect(route).toMatch(new RegExp(`^/v1/files/exports/[0-9a-f]{16}\\?session=mcp-${c.sessionId()}$`));
      expect(ex.text).toContain(route);
      const got = await download(server.client(token), route);
      expect(got.status).toBe(200);
      expect(got.data.toString()).toBe('report\n');
    } finally {
      await c.close();
    }
  });
});
