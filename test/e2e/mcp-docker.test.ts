import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { McpError } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  assertNoneLeft,
  containerFor,
  describeContainers,
  describeDocker,
  dockerConfig,
  dockerConfigYaml,
  ensureImage,
  installs,
  waitFor,
  type TestInstall,
} from '../helpers/docker-e2e.js';
import { call, httpConn, startHttpMcp, stdioConn, type McpConn } from '../helpers/mcp-clients.js';

/*
 * The MCP server against the real engine, over both transports: `berth mcp` spawned over stdio
 * (the built dist/) and the streamable HTTP handler on a loopback server. Every MCP session is one
 * berth session; the config is docker with persistent: false, so each session gets its own
 * ephemeral container, which must be gone once the session ends.
 */

const reg = installs('berth-mcp-');

interface Rig {
  connect(): Promise<McpConn>;
}

const TRANSPORTS: Record<'stdio' | 'http', (t: TestInstall, cleanups: (() => Promise<void>)[]) => Promise<Rig>> = {
  async stdio(t, cleanups) {
    t.writeConfig(dockerConfigYaml({ persistent: false }));
    return {
      async connect() {
        const conn = await stdioConn({ cwd: t.dir, env: t.env });
        cleanups.push(() => conn.close());
        return conn;
      },
    };
  },
  async http(t, cleanups) {
    const broker = await t.open(dockerConfig({ persistent: false }));
    const server = await startHttpMcp(broker);
    cleanups.push(() => server.close());
    return {
      async connect() {
        const conn = await httpConn(server.url, 'acme');
        cleanups.push(() => conn.close());
        return conn;
      },
    };
  },
};

async function expectProtocolError(p: Promise<unknown>, pattern: RegExp): Promise<void> {
  const err = await p.then(() => undefined, (e: unknown) => e);
  expect(err, 'expected the call to reject with a JSON-RPC error, not to return a result').toBeInstanceOf(McpError);
  expect((err as McpError).code).toBe(-32602);
  expect((err as McpError).message).toMatch(pattern);
}

/** Polls process {read} until `until` holds for the accumulated output or the job is done. */
async function readJobUntil(conn: McpConn, jobId: string, until: (out: string) => boolean, timeoutMs = 20_000) {
  let offset = 0;
  let out = '';
  let last: Record<string, unknown> = {};
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const r = await call(conn, 'process', { action: 'read', jobId, offset });
    expect(r.isError, r.text).toBe(false);
    last = r.structured;
    const next = last['nextOffset'] as number;
    expect(next).toBeGreaterThanOrEqual(offset);
    if (next > offset) out += r.text.split('\n').slice(2).join('\n');
    offset = next;
    if (until(out) || last['done'] === true || Date.now() > deadline) return { out, last, offset };
    await new Promise((r2) => setTimeout(r2, 150));
  }
}

describeDocker('MCP server on the real docker engine', () => {
  beforeAll(ensureImage, 180_000);
  const cleanups: (() => Promise<void>)[] = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c().catch(() => undefined);
    await reg.cleanupAll();
  }, 60_000);
  afterAll(async () => {
    await assertNoneLeft(reg.ids);
  });

  for (const kind of ['stdio', 'http'] as const) {
    describe(`over ${kind}`, () => {
      it('terminal in two MCP sessions: separate containers, a file written in one is not visible in the other; cwd persists within a session', async () => {
        const t = reg.track();
        const rig = await TRANSPORTS[kind](t, cleanups);
        const [a, b] = await Promise.all([rig.connect(), rig.connect()]);

        const w = await call(a, 'terminal', { command: 'echo from-a > /workspace/probe.txt && mkdir -p /tmp/deep/er && cd /tmp/deep/er && hostname' });
        expect(w.isError, w.text).toBe(false);
        const pwd = await call(a, 'terminal', { command: 'pwd' });
        expect(pwd.text).toContain('[stdout]\n/tmp/deep/er\n');
        expect(pwd.structured).toMatchObject({ exitCode: 0, cwd: '/tmp/deep/er' });
        const own = await call(a, 'terminal', { command: 'cat /workspace/probe.txt' });
        expect(own.text).toContain('from-a');

        const r = await call(b, 'terminal', { command: 'cat /workspace/probe.txt; echo "host=$(hostname)"; pwd' });
        expect(r.text).not.toContain('from-a');
        expect(r.text).toContain('No such file');
        const hostA = /\[stdout\]\n(.+)\n/.exec(w.text)?.[1];
        expect(hostA, w.text).toBeTruthy();
        expect(r.text).toMatch(/host=\S+/);
        expect(r.text).not.toContain(`host=${hostA}\n`);
        expect(r.structured['cwd']).toBe('/workspace');
        const keyA = pwd.structured['sandboxKey'] as string;
        const keyB = r.structured['sandboxKey'] as string;
        expect(keyA).toMatch(/^session:mcp-/);
        expect(keyB).toMatch(/^session:mcp-/);
        expect(keyA).not.toBe(keyB);
        const ca = await containerFor(t.installation, keyA);
        const cb = await containerFor(t.installation, keyB);
        expect(ca.id).not.toBe(cb.id);

        const tools = await a.client.listTools();
        const terminal = tools.tools.find((x) => x.name === 'terminal');
        expect(terminal?.description).toMatch(/Docker container created for this session, isolated from the host/);
        expect(terminal?.description).toMatch(/files vanish when this session closes/);
        expect(terminal?.inputSchema).toMatchObject({ required: ['command'], additionalProperties: false });
        expect(tools.tools.map((x) => x.name).sort()).toEqual(['export_file', 'process', 'read_file', 'snapshot_create', 'snapshot_list', 'snapshot_restore', 'terminal', 'write_file']);
        expect(a.client.getInstructions()).toContain(`sandbox "${keyA}"`);
      });

      it('a non-zero exit and a timeout are isError results with readable text; the session stays usable', async () => {
        const t = reg.track();
        const rig = await TRANSPORTS[kind](t, cleanups);
        const c = await rig.connect();

        const failed = await call(c, 'terminal', { command: 'cd /tmp && echo out-line; echo err-line >&2; exit 3' });
        expect(failed.isError).toBe(true);
        expect(failed.text).toMatch(/^exit code 3 \(the command failed\)\ncwd \/tmp\n/);
        expect(failed.text).toContain('[stdout]\nout-line\n');
        expect(failed.text).toContain('[stderr]\nerr-line\n');
        expect(failed.structured).toMatchObject({ exitCode: 3, timedOut: false, truncated: false, cwd: '/tmp' });

        const started = Date.now();
        const slow = await call(c, 'terminal', { command: 'echo before-sleep; sleep 30', timeout: 1 });
        expect(Date.now() - started).toBeLessThan(15_000);
        expect(slow.isError).toBe(true);
        expect(slow.text).toMatch(/^timed out after 1 s: the command's process tree was killed \(exit code 124\)/);
        expect(slow.text).toContain('before-sleep');
        expect(slow.structured).toMatchObject({ exitCode: 124, timedOut: true });

        const alive = await call(c, 'terminal', { command: 'echo alive; pwd' });
        expect(alive.isError, alive.text).toBe(false);
        expect(alive.text).toContain('alive\n/tmp\n');
      });

      it('bad arguments are protocol errors (-32602), not tool results, and run nothing', async () => {
        const t = reg.track();
        const rig = await TRANSPORTS[kind](t, cleanups);
        const c = await rig.connect();
        await expectProtocolError(c.client.callTool({ name: 'terminal', arguments: { command: 5 } }), /command: Invalid input: expected string/);
        await expectProtocolError(c.client.callTool({ name: 'terminal', arguments: { command: 'touch /workspace/ran', extra: 1 } }), /Unrecognized key: "extra"/);
        await expectProtocolError(c.client.callTool({ name: 'terminal', arguments: {} }), /command: Invalid input/);
        await expectProtocolError(c.client.callTool({ name: 'terminal', arguments: { command: 'ls', timeout: '5' } }), /timeout/);
        await expectProtocolError(c.client.callTool({ name: 'terminal', arguments: { command: 'ls', timeout: 0 } }), /timeout/);
        await expectProtocolError(c.client.callTool({ name: 'terminal', arguments: { command: 'sleep 1', background: true, timeout: 5 } }), /timeout applies to foreground/);
        await expectProtocolError(c.client.callTool({ name: 'process', arguments: { action: 'read' } }), /jobId: action "read" needs a jobId/);
        await expectProtocolError(c.client.callTool({ name: 'process', arguments: { action: 'bogus' } }), /action/);
        await expectProtocolError(c.client.callTool({ name: 'write_file', arguments: { path: 'x', content: '%%%', encoding: 'base64' } }), /not valid base64/);
        await expectProtocolError(c.client.callTool({ name: 'no_such_tool', arguments: {} }), /unknown tool "no_such_tool"/);
        // Nothing ran: no sandbox was created for this session.
        expect(await t.containers(), describeContainers(await t.containers())).toEqual([]);
      });

      it('background jobs: terminal {background: true} starts one; process lists, reads from an offset, and kills it', async () => {
        const t = reg.track();
        const rig = await TRANSPORTS[kind](t, cleanups);
        const c = await rig.connect();

        const start = await call(c, 'terminal', { command: 'for i in $(seq 1 600); do echo tick-$i; sleep 0.1; done', background: true });
        expect(start.isError, start.text).toBe(false);
        const jobId = start.structured['jobId'] as string;
        expect(jobId).toBeTruthy();
        expect(start.text).toContain(`started background job ${jobId}`);

        const list = await call(c, 'process', { action: 'list' });
        expect(list.text).toContain(jobId);
        expect(list.structured['jobs']).toEqual([expect.objectContaining({ jobId, status: 'running', exitCode: null })]);

        const first = await readJobUntil(c, jobId, (out) => out.includes('tick-3\n'));
        expect(first.out).toMatch(/^tick-1\ntick-2\ntick-3\n/);
        expect(first.last).toMatchObject({ status: 'running', done: false });
        // From the returned offset only new output comes back (read until some has).
        let more = await call(c, 'process', { action: 'read', jobId, offset: first.offset });
        for (const deadline = Date.now() + 10_000; (more.structured['nextOffset'] as number) <= first.offset && Date.now() < deadline;) {
          await new Promise((r) => setTimeout(r, 150));
          more = await call(c, 'process', { action: 'read', jobId, offset: first.offset });
        }
        expect(more.text).not.toContain('tick-1\n');
        expect(more.text).toMatch(/tick-\d+/);

        const killed = await call(c, 'process', { action: 'kill', jobId });
        expect(killed.isError, killed.text).toBe(false);
        expect(killed.structured).toEqual({ jobId, killed: true });
        const after = await readJobUntil(c, jobId, () => false, 10_000);
        expect(after.last).toMatchObject({ status: 'killed', done: true });

        // A job that ends by itself reports its exit code; the shell was never blocked.
        const short = await call(c, 'terminal', { command: 'echo short-job; exit 7', background: true });
        const shortId = short.structured['jobId'] as string;
        const done = await readJobUntil(c, shortId, () => false, 10_000);
        expect(done.out).toContain('short-job');
        expect(done.last).toMatchObject({ status: 'exited', exitCode: 7, done: true });
        const fg = await call(c, 'terminal', { command: 'echo fg-ok' });
        expect(fg.text).toContain('fg-ok');

        const unknown = await call(c, 'process', { action: 'read', jobId: 'no-such-job' });
        expect(unknown.isError).toBe(true);
      });

      it('closing the MCP session closes the berth session and removes its ephemeral container', async () => {
        const t = reg.track();
        const rig = await TRANSPORTS[kind](t, cleanups);
        const c = await rig.connect();
        const r = await call(c, 'terminal', { command: 'echo up' });
        const key = r.structured['sandboxKey'] as string;
        await containerFor(t.installation, key);
        await c.close();
        const gone = await waitFor(async () => (await t.containers()).every((x) => x.labels['berth.key'] !== key), 20_000);
        expect(gone, `container of ${key} survived the MCP session: ${describeContainers(await t.containers())}; stderr: ${c.stderr()}`).toBe(true);
      });

      it('read_file / write_file / export_file round trip; the exported copy goes when the session closes', async () => {
        const t = reg.track();
        const rig = await TRANSPORTS[kind](t, cleanups);
        const c = await rig.connect();

        const w = await call(c, 'write_file', { path: '/workspace/notes/hello.txt', content: 'héllo\nworld\n' });
        expect(w.isError, w.text).toBe(false);
        expect(w.structured).toMatchObject({ bytes: Buffer.byteLength('héllo\nworld\n') });
        const cat = await call(c, 'terminal', { command: 'cat /workspace/notes/hello.txt' });
        expect(cat.text).toContain('[stdout]\nhéllo\nworld\n');
        const read = await call(c, 'read_file', { path: '/workspace/notes/hello.txt' });
        expect(read).toMatchObject({ isError: false, text: 'héllo\nworld\n', structured: { encoding: 'utf8' } });

        const bytes = Buffer.from([0, 255, 1, 128, 10]);
        const wb = await call(c, 'write_file', { path: '/workspace/bin.dat', content: bytes.toString('base64'), encoding: 'base64' });
        expect(wb.isError, wb.text).toBe(false);
        const rb = await call(c, 'read_file', { path: '/workspace/bin.dat' });
        expect(rb.structured).toMatchObject({ encoding: 'base64', bytes: 5 });
        expect(rb.text.split('\n').at(-1)).toBe(bytes.toString('base64'));

        const ex = await call(c, 'export_file', { path: '/workspace/notes/hello.txt' });
        expect(ex.isError, ex.text).toBe(false);
        let hostPath: string;
        if (kind === 'stdio') {
          // A local caller (berth mcp) gets the host path.
          hostPath = ex.structured['hostPath'] as string;
        } else {
          // A remote caller gets a download route, never a host path; the copy is in staging all the same.
          expect(ex.structured).not.toHaveProperty('hostPath');
          expect(ex.text).not.toContain(t.home);
          const id = ex.structured['exportId'] as string;
          expect(ex.structured['download']).toMatch(new RegExp(`^/v1/files/exports/${id}\\?session=mcp-`));
          const found = (readdirSync(join(t.home, 'staging'), { recursive: true }) as string[]).filter((p) => new RegExp(`${id}-\\d+/hello\\.txt$`).test(p));
          expect(found).toHaveLength(1);
          hostPath = join(t.home, 'staging', found[0]!);
        }
        expect(existsSync(hostPath)).toBe(true);
        expect(readFileSync(hostPath, 'utf8')).toBe('héllo\nworld\n');

        const missing = await call(c, 'read_file', { path: '/workspace/nope.txt' });
        expect(missing.isError).toBe(true);
        expect(missing.text).toMatch(/^berth could not run this call \(\w+\): .*nope\.txt/);

        await c.close();
        expect(await waitFor(() => !existsSync(hostPath), 10_000), `${hostPath} outlived its session`).toBe(true);
      });
    });
  }
});
