import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { expect, it } from 'vitest';
import { runBerth } from '../helpers/cli.js';
import { describeDocker, docker, dockerConfigYaml, dockerSuiteHooks, installs, type TestInstall } from '../helpers/docker-e2e.js';
import { call, httpConn } from '../helpers/mcp-clients.js';
import { createToken, ServeProcess, stopAll } from '../helpers/serve.js';

/*
 * Snapshots, restore and fork on docker through every surface: the CLI (a process per command),
 * HTTP with two tenants' tokens, and MCP. Files and the shell's state (cwd, an exported variable)
 * come back; forks never see each other; a restore whose image was removed behind berth's back
 * changes nothing and says so; no snapshot holds a granted secret's value. The files live in the
 * sandbox's home, which a snapshot keeps (an attached /workspace is the user's and is not copied).
 */

const reg = installs('berth-snapshots-');

/** Snapshot images of an installation go with its containers (the install's cleanup knows containers and networks). */
async function removeImagesOf(installation: string): Promise<void> {
  const list = await docker.listImages({ all: true, filters: JSON.stringify({ label: [`berth.installation=${installation}`] }) });
  for (const i of list) await docker.getImage(i.Id).remove({ force: true }).catch(() => undefined);
}

const tracked: TestInstall[] = [];
function track(): TestInstall {
  const t = reg.track();
  tracked.push(t);
  return t;
}

const STATE = 'mkdir -p "$HOME/w/sub" && cd "$HOME/w/sub" && export STAGE=one && echo one > "$HOME/file"';
const READ = 'printf "%s|%s|%s\\n" "$PWD" "${STAGE-unset}" "$(cat "$HOME/file")"';

describeDocker('snapshots, restore and fork (docker)', () => {
  dockerSuiteHooks(reg, async () => {
    await stopAll();
    for (const t of tracked.splice(0)) {
      // The containers first (an image a container uses cannot go), then the snapshot images.
      await t.cleanup();
      await removeImagesOf(t.installation);
    }
  });

  it('CLI: snapshot, restore and fork keep files, cwd and exported variables; forks are independent; a restore of a removed image changes nothing', async () => {
    const t = track();
    t.writeConfig(dockerConfigYaml({ persistent: false }));
    const berth = (...args: string[]) => runBerth(args, { env: t.env, cwd: t.dir, timeoutMs: 120_000 });
    expect(await berth('exec', '--session', 's1', '--', STATE)).toMatchObject({ code: 0 });
    const home = (await berth('exec', '--session', 's1', '--', 'printf %s "$HOME"')).stdout;
    const made = await berth('snapshot', 'create', '--session', 's1', '--name', 'one', '--json');
    expect(made.code, made.stderr).toBe(0);
    expect(JSON.parse(made.stdout)).toMatchObject({ name: 'one', sandboxKey: 'session:s1', backend: 'docker' });
    expect(await berth('exec', '--session', 's1', '--', 'cd / && export STAGE=two && echo two > "$HOME/file"')).toMatchObject({ code: 0 });

    const restored = await berth('snapshot', 'restore', '--session', 's1', 'one');
    expect(restored.code, restored.stderr).toBe(0);
    expect((await berth('exec', '--session', 's1', '--', READ)).stdout).toBe(`${home}/w/sub|one|one\n`);

    const forked = await berth('fork', '--session', 's1', '--to-session', 's2');
    expect(forked.code, forked.stderr).toBe(0);
    await berth('fork', '--session', 's1', '--to-session', 's3');
    expect((await berth('exec', '--session', 's2', '--', READ)).stdout).toBe(`${home}/w/sub|one|one\n`);
    await berth('exec', '--session', 's2', '--', 'echo s2 > "$HOME/file"');
    await berth('exec', '--session', 's1', '--', 'echo s1 > "$HOME/file"');
    expect((await berth('exec', '--session', 's3', '--', 'cat "$HOME/file"')).stdout).toBe('one\n');
    expect((await berth('exec', '--session', 's2', '--', 'cat "$HOME/file"')).stdout).toBe('s2\n');

    const ls = await berth('snapshot', 'ls', '--json');
    expect((JSON.parse(ls.stdout) as { name: string }[]).map((s) => s.name)).toEqual(['one']);

    // The operator removes the snapshots behind berth's back (their images, which the engine keeps
    // while a container runs from one, and their dirs): the restore refuses and changes nothing.
    const images = await docker.listImages({ all: true, filters: JSON.stringify({ label: [`berth.installation=${t.installation}`] }) });
    for (const i of images) await docker.getImage(i.Id).remove({ force: true }).catch(() => undefined);
    rmSync(join(t.home, 'snapshots', 'docker'), { recursive: true, force: true });
    const failed = await berth('snapshot', 'restore', '--session', 's1', 'one');
    expect(failed.code).not.toBe(0);
    expect(failed.stderr).toMatch(/snapshot "one" cannot be restored: .*; sandbox "session:s1" and snapshot "one" are as they were/);
    expect((await berth('exec', '--session', 's1', '--', 'cat "$HOME/file"')).stdout).toBe('s1\n');
    expect((JSON.parse((await berth('snapshot', 'ls', '--json')).stdout) as { name: string }[]).map((s) => s.name)).toEqual(['one']);
    for (const s of ['s1', 's2', 's3']) expect(await berth('close', '--session', s)).toMatchObject({ code: 0 });
  }, 300_000);

  it('CLI: a restore is refused while a process a command left runs in the sandbox (no berth process holds it), and changes nothing', async () => {
    const t = track();
    t.writeConfig(dockerConfigYaml({ persistent: false }));
    const berth = (...args: string[]) => runBerth(args, { env: t.env, cwd: t.dir, timeoutMs: 120_000 });
    expect(await berth('exec', '--session', 'd', '--', STATE)).toMatchObject({ code: 0 });
    expect((await berth('snapshot', 'create', '--session', 'd', '--name', 'one')).code).toBe(0);
    // Outside the shell's job table: the CLI process that started it is gone when the restore comes.
    expect(await berth('exec', '--session', 'd', '--', 'echo two > "$HOME/file"; (sleep 300 & echo $! > "$HOME/daemon")')).toMatchObject({ code: 0 });
    const refused = await berth('snapshot', 'restore', '--session', 'd', 'one');
    expect(refused.code).not.toBe(0);
    expect(refused.stderr).toMatch(/sandbox "session:d" cannot be restored now: a process a command left running \(a daemon too\) still runs in it/);
    expect((await berth('exec', '--session', 'd', '--', 'cat "$HOME/file"; kill -0 "$(cat "$HOME/daemon")" && echo alive')).stdout).toBe('two\nalive\n');
    expect(await berth('exec', '--session', 'd', '--', 'kill "$(cat "$HOME/daemon")"')).toMatchObject({ code: 0 });
    const restored = await berth('snapshot', 'restore', '--session', 'd', 'one');
    expect(restored.code, restored.stderr).toBe(0);
    expect((await berth('exec', '--session', 'd', '--', 'cat "$HOME/file"')).stdout).toBe('one\n');
    expect(await berth('close', '--session', 'd')).toMatchObject({ code: 0 });
  }, 180_000);

  it('HTTP with two tokens: tenant B neither lists nor restores tenant A\'s snapshots; a granted secret written to a file is refused', async () => {
    const t = track();
    t.writeConfig(dockerConfigYaml({ persistent: false, env: { forward: ['API_TOKEN'] } }));
    const secret = 'tok-7d1e9a44c0b2f6e3';
    const server = await ServeProcess.start({ dir: t.dir, env: { ...t.env, API_TOKEN: secret } });
    const a = server.client(await createToken(t, 'tenant-a'));
    const b = server.client(await createToken(t, 'tenant-b'));
    expect((await a.post('/v1/exec', { session: 's1', command: STATE })).status).toBe(200);
    const made = await a.post('/v1/snapshots', { session: 's1', name: 'cp1' });
    expect(made.status, JSON.stringify(made.body)).toBe(201);
    expect((await a.get('/v1/snapshots')).body).toMatchObject([{ name: 'cp1', sandboxKey: 'session:s1' }]);

    expect((await b.get('/v1/snapshots')).body).toEqual([]);
    expect((await b.get('/v1/snapshots?session=s1')).body).toEqual([]);
    const stolen = await b.post('/v1/snapshots/cp1/restore', { session: 's1' });
    expect(stolen.status).toBe(404);
    expect((await b.post('/v1/fork', { session: 's1', toSession: 'x', from: 'cp1' })).status).toBe(404);
    expect((await b.request('DELETE', '/v1/snapshots/cp1?session=s1')).body).toEqual({ removed: false });

    await a.post('/v1/exec', { session: 's1', command: 'echo changed > "$HOME/file"' });
    const r = await a.post('/v1/snapshots/cp1/restore', { session: 's1' });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect((await a.post('/v1/exec', { session: 's1', command: READ })).body).toMatchObject({ stdout: expect.stringMatching(/\/w\/sub\|one\|one\n$/) });
    const f = await a.post('/v1/fork', { session: 's1', toSession: 's2' });
    expect(f.status, JSON.stringify(f.body)).toBe(201);
    expect((await a.post('/v1/exec', { session: 's2', command: READ })).body).toMatchObject({ stdout: expect.stringMatching(/\/w\/sub\|one\|one\n$/) });

    await a.post('/v1/exec', { session: 's1', command: 'echo "$API_TOKEN" > "$HOME/leak"' });
    const leak = await a.post('/v1/snapshots', { session: 's1', name: 'leak' });
    expect(leak.status).toBe(403);
    expect(JSON.stringify(leak.body)).toMatch(/API_TOKEN/);
    expect(JSON.stringify(leak.body)).not.toContain(secret);
    expect(((await a.get('/v1/snapshots')).body as { name: string }[]).map((s) => s.name)).toEqual(['cp1']);

    const doc = (await a.get('/v1/openapi.json')).body as { paths: Record<string, unknown> };
    expect(Object.keys(doc.paths)).toEqual(expect.arrayContaining(['/v1/snapshots', '/v1/snapshots/{name}', '/v1/snapshots/{name}/restore', '/v1/fork']));
    await a.post('/v1/sessions/close', { session: 's1' });
    await a.post('/v1/sessions/close', { session: 's2' });
    await server.stop();
  }, 300_000);

  it('MCP: the agent checkpoints before a risky step and rolls back after', async () => {
    const t = track();
    t.writeConfig(dockerConfigYaml({ persistent: false }));
    const server = await ServeProcess.start(t);
    const conn = await httpConn(new URL(`${server.url}/mcp`), { token: await createToken(t, 'acme') });
    try {
      expect((await call(conn, 'terminal', { command: STATE })).isError).toBe(false);
      const made = await call(conn, 'snapshot_create', { name: 'before-risky' });
      expect(made.isError, made.text).toBe(false);
      await call(conn, 'terminal', { command: 'rm -rf "$HOME/w" "$HOME/file"; cd /; unset STAGE' });
      expect((await call(conn, 'snapshot_list', {})).text).toMatch(/^before-risky {2}\d+ bytes/);
      const back = await call(conn, 'snapshot_restore', { name: 'before-risky' });
      expect(back.isError, back.text).toBe(false);
      expect((await call(conn, 'terminal', { command: READ })).text).toMatch(/\/w\/sub\|one\|one/);
      const missing = await call(conn, 'snapshot_restore', { name: 'nope' });
      expect(missing).toMatchObject({ isError: true });
      expect(missing.text).toMatch(/has no snapshot "nope"/);
    } finally {
      await conn.close();
      await server.stop();
    }
  }, 300_000);
});
