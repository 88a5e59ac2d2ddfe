import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import Database from 'better-sqlite3';
import { runBerth, tempInstall } from '../helpers/cli.js';
import { call, httpConn } from '../helpers/mcp-clients.js';
import { ServeProcess, stopAll } from '../helpers/serve.js';

/*
 * `berth token` through the real CLI (bin/berth.js, the built dist/): tokens live in the SQLite
 * state, so concurrent creates all land and a revoke racing creates stays revoked; a token
 * carries the profiles it may use; an old tokens.json is imported once.
 */

// The default backend (docker) is never contacted by these tests: serve touches no engine until a call.
const CONFIG = 'persistent: false\n';
/** A CLI run among two dozen started at once on a shared machine: slow, but it must finish. */
const SLOW_MS = 180_000;

interface Listed {
  id: string;
  tenant: string;
  profiles: string[];
  createdMs: number;
}

afterEach(() => stopAll());

async function list(t: { env: NodeJS.ProcessEnv; dir: string }): Promise<Listed[]> {
  const r = await runBerth(['token', 'list', '--json'], { env: t.env, cwd: t.dir });
  expect(r.code, r.stderr).toBe(0);
  return JSON.parse(r.stdout) as Listed[];
}

async function create(t: { env: NodeJS.ProcessEnv; dir: string }, args: string[]): Promise<{ token: string; id: string; stderr: string }> {
  const r = await runBerth(['token', 'create', ...args], { env: t.env, cwd: t.dir });
  expect(r.code, r.stderr).toBe(0);
  const lines = r.stdout.trim().split('\n');
  const id = /token (tok_[0-9a-f]{12})/.exec(r.stderr)?.[1];
  expect(id, r.stderr).toBeDefined();
  return { token: lines[lines.length - 1] as string, id: id as string, stderr: r.stderr };
}

async function whoami(server: ServeProcess, token: string): Promise<number> {
  return (await server.client(token).get('/v1/whoami')).status;
}

describe('berth token: tokens in the SQLite state', () => {
  it('24 concurrent `token create` processes all land', async () => {
    using t = tempInstall(CONFIG);
    const N = 24;
    const runs = await Promise.all(Array.from({ length: N }, (_, i) => runBerth(['token', 'create', '--tenant', `t${i}`], { env: t.env, cwd: t.dir, timeoutMs: SLOW_MS })));
    expect(runs.map((r) => r.code), runs.map((r) => r.stderr).join('')).toEqual(Array(N).fill(0));
    const tenants = (await list(t)).map((e) => e.tenant).sort();
    expect(tenants).toEqual(Array.from({ length: N }, (_, i) => `t${i}`).sort());
  }, 2 * SLOW_MS);

  it('a revoke racing creates leaves the revoked token dead (list and a running server agree)', async () => {
    using t = tempInstall(CONFIG);
    const victims: { token: string; id: string }[] = [];
    for (let i = 0; i < 3; i++) victims.push(await create(t, ['--tenant', `victim${i}`]));
    const server = await ServeProcess.start(t);
    for (const v of victims) expect(await whoami(server, v.token)).toBe(200);

    const creates = Array.from({ length: 15 }, (_, i) => runBerth(['token', 'create', '--tenant', `racer${i}`], { env: t.env, cwd: t.dir, timeoutMs: SLOW_MS }));
    const revokes = victims.map((v) => runBerth(['token', 'revoke', v.id], { env: t.env, cwd: t.dir, timeoutMs: SLOW_MS }));
    const done = await Promise.all([...creates, ...revokes]);
    expect(done.map((r) => r.code), done.map((r) => r.stderr).join('')).toEqual(Array(done.length).fill(0));

    const after = await list(t);
    for (const v of victims) expect(after.map((e) => e.id)).not.toContain(v.id);
    expect(after.map((e) => e.tenant).sort()).toEqual(Array.from({ length: 15 }, (_, i) => `racer${i}`).sort());
    // The server that saw them working sees them revoked on the next request.
    for (const v of victims) expect(await whoami(server, v.token)).toBe(401);
    const late = await create(t, ['--tenant', 'late']);
    expect(await whoami(server, late.token)).toBe(200);
  }, 2 * SLOW_MS);

  it('a token carries the profiles it may use: default only unless --profile is given; list shows them', async () => {
    using t = tempInstall(CONFIG);
    const plain = await create(t, ['--tenant', 'acme']);
    const bot = await create(t, ['--tenant', 'acme', '--profile', 'bot', '--profile', 'ops', '--profile', 'bot']);
    expect(bot.stderr).toMatch(/profiles bot, ops/);
    const entries = await list(t);
    expect(entries.find((e) => e.id === plain.id)?.profiles).toEqual(['default']);
    expect(entries.find((e) => e.id === bot.id)?.profiles).toEqual(['bot', 'ops']);
    const text = await runBerth(['token', 'list'], { env: t.env, cwd: t.dir });
    expect(text.stdout).toMatch(new RegExp(`${bot.id}\\s+-\\s+acme\\s+bot,ops\\s`));

    const bad = await runBerth(['token', 'create', '--tenant', 'acme', '--profile', 'no/slash'], { env: t.env, cwd: t.dir });
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/^berth: profile "no\/slash"/);
    expect(bad.stdout).toBe('');
  });

  it('an existing tokens.json is imported once (profiles ["default"]), renamed, and says so on stderr', async () => {
    using t = tempInstall(CONFIG);
    const token = `berth_${'A'.repeat(43)}`;
    const sha256 = createHash('sha256').update(token).digest('hex');
    mkdirSync(t.home, { recursive: true, mode: 0o700 });
    const file = join(t.home, 'tokens.json');
    writeFileSync(file, JSON.stringify({ version: 1, tokens: [{ id: 'tok_0123456789ab', sha256, tenant: 'old', createdMs: 1_700_000_000_000 }] }), { mode: 0o600 });

    const first = await runBerth(['token', 'list', '--json'], { env: t.env, cwd: t.dir });
    expect(first.code, first.stderr).toBe(0);
    expect(first.stderr).toMatch(/imported 1 token\(s\) from .*tokens\.json.*renamed it to .*tokens\.json\.imported/);
    expect(JSON.parse(first.stdout)).toEqual([{ id: 'tok_0123456789ab', name: null, tenant: 'old', profiles: ['default'], createdMs: 1_700_000_000_000 }]);
    expect(existsSync(file)).toBe(false);
    expect(existsSync(`${file}.imported`)).toBe(true);
    expect(readFileSync(`${file}.imported`, 'utf8')).toContain(sha256);

    const second = await runBerth(['token', 'list', '--json'], { env: t.env, cwd: t.dir });
    expect(second.stderr).toBe('');
    expect((JSON.parse(second.stdout) as Listed[]).map((e) => e.id)).toEqual(['tok_0123456789ab']);

    // The imported token authenticates; revoking it is final (the renamed file is never read again).
    const server = await ServeProcess.start(t);
    expect(await whoami(server, token)).toBe(200);
    expect((await runBerth(['token', 'revoke', 'tok_0123456789ab'], { env: t.env, cwd: t.dir })).code).toBe(0);
    expect(await whoami(server, token)).toBe(401);
    await server.stop();
    const again = await ServeProcess.start(t);
    expect(await whoami(again, token)).toBe(401);
  }, 60_000);

  it('--name: checked, unique within a tenant, listed, and named in the audit of every call made with it (HTTP and MCP)', async () => {
    using t = tempInstall('backend: local\npersistent: false\nserver:\n  allowHostBackend: true\n');
    const ci = await create(t, ['--tenant', 'acme', '--name', 'ci-bot']);
    expect(ci.stderr).toMatch(/^berth: token tok_[0-9a-f]{12} "ci-bot" for tenant "acme"/);
    const plain = await create(t, ['--tenant', 'acme']);
    // The same name in another tenant is another token's; in the same tenant it is refused.
    await create(t, ['--tenant', 'other', '--name', 'ci-bot']);
    const dup = await runBerth(['token', 'create', '--tenant', 'acme', '--name', 'ci-bot'], { env: t.env, cwd: t.dir });
    expect(dup).toEqual({ code: 2, stdout: '', stderr: 'berth: a token named "ci-bot" exists already among tenant "acme"; pick another name, or revoke that one first (berth token list)\n' });
    for (const bad of ['', 'has space', '-lead', 'x'.repeat(65), 'é', 'a\u001b[2J']) {
      const r = await runBerth(['token', 'create', '--tenant', 'acme', `--name=${bad}`], { env: t.env, cwd: t.dir });
      expect(r.code, bad).toBe(2);
      expect(r.stderr, bad).toMatch(/^berth: token name .* must be 1-64 characters of letters, digits, '\.', '_' or '-', starting with a letter or digit/);
    }
    expect((await runBerth(['token', 'list', '--name', 'x'], { env: t.env, cwd: t.dir })).code).toBe(2);
    const listed = await list(t) as (Listed & { name: string | null })[];
    expect(listed.filter((e) => e.tenant === 'acme').map((e) => [e.id, e.name])).toEqual([[ci.id, 'ci-bot'], [plain.id, null]]);
    expect((await runBerth(['token', 'list'], { env: t.env, cwd: t.dir })).stdout).toMatch(new RegExp(`^${ci.id}\\s+ci-bot\\s+acme\\s+default\\s`, 'm'));

    const server = await ServeProcess.start(t);
    expect((await server.client(ci.token).post('/v1/exec', { session: 'named', command: 'true' })).status).toBe(200);
    expect((await server.client(plain.token).post('/v1/exec', { session: 'named', command: 'true' })).status).toBe(200);
    const mcp = await httpConn(new URL(`${server.url}/mcp`), { token: ci.token });
    try {
      expect((await call(mcp, 'terminal', { command: 'true' })).isError).toBe(false);
    } finally {
      await mcp.close();
    }
    expect((await server.client(ci.token).post('/v1/sessions/close', { session: 'named' })).status).toBe(200);
    const audit = (await server.client(ci.token).get('/v1/audit')).body as { kind: string; session: string; tokenId: string | null; tokenName: string | null }[];
    expect(audit.map((e) => [e.kind, e.session.startsWith('mcp-') ? 'mcp' : e.session, e.tokenId, e.tokenName]).reverse()).toEqual([
      ['exec', 'named', ci.id, 'ci-bot'], ['exec', 'named', plain.id, null], ['exec', 'mcp', ci.id, 'ci-bot'],
      ['close', 'mcp', ci.id, 'ci-bot'], ['close', 'named', ci.id, 'ci-bot'],
    ]);
    await server.stop();
    const text = await runBerth(['audit', '--tenant', 'acme', '--session', 'named'], { env: t.env, cwd: t.dir });
    expect(text.stdout.split('\n')[0]).toMatch(/ TOKEN +COMMAND$/);
    expect(text.stdout).toMatch(new RegExp(`^\\S+ +exec +- +named +session:named +0 +\\d+ ${plain.id} +true$`, 'm'));
    expect(text.stdout).toMatch(/^\S+ +exec +- +named +session:named +0 +\d+ ci-bot +true$/m);
  }, 60_000);

  it('a state from before token names keeps its tokens and audit: they list with no name, authenticate, and new entries name the token', async () => {
    using t = tempInstall('persistent: false\n');
    mkdirSync(t.home, { recursive: true, mode: 0o700 });
    const token = `berth_${'B'.repeat(43)}`;
    const db = new Database(join(t.home, 'state.db'));
    db.exec(`CREATE TABLE tokens (id TEXT PRIMARY KEY, sha256 TEXT NOT NULL UNIQUE, tenant TEXT NOT NULL, profiles TEXT NOT NULL, created_ms INTEGER NOT NULL,
        kind TEXT NOT NULL DEFAULT 'tenant');
      CREATE TABLE audit (id INTEGER PRIMARY KEY AUTOINCREMENT, time_ms INTEGER NOT NULL, tenant TEXT NOT NULL, profile TEXT NOT NULL,
        user TEXT, session TEXT, sandbox_key TEXT, kind TEXT NOT NULL, command TEXT, exit_code INTEGER, duration_ms INTEGER);
      INSERT INTO audit (time_ms, tenant, profile, session, kind, command, exit_code, duration_ms) VALUES (${Date.now()}, 'old', 'default', 's', 'exec', 'echo before', 0, 1);`);
    db.prepare('INSERT INTO tokens VALUES (?, ?, ?, ?, ?, ?)').run('tok_00000000000b', createHash('sha256').update(token).digest('hex'), 'old', '["default"]', 1_700_000_000_000, 'tenant');
    db.close();
    expect(await list(t)).toEqual([{ id: 'tok_00000000000b', name: null, tenant: 'old', profiles: ['default'], createdMs: 1_700_000_000_000 }]);
    const named = await create(t, ['--tenant', 'old', '--name', 'after']);
    expect((await list(t) as (Listed & { name: string | null })[]).map((e) => e.name)).toEqual([null, 'after']);
    const server = await ServeProcess.start(t);
    expect(await whoami(server, token)).toBe(200);
    // A close touches no engine: an audit entry with the token, beside the old one without.
    expect((await server.client(named.token).post('/v1/sessions/close', { session: 's' })).status).toBe(200);
    const audit = (await server.client(token).get('/v1/audit')).body as { command: string | null; tokenName: string | null; tokenId: string | null }[];
    expect(audit.map((e) => [e.command, e.tokenId, e.tokenName])).toEqual([[null, named.id, 'after'], ['echo before', null, null]]);
  }, 60_000);
});
