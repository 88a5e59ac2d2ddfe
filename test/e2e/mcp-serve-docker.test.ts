import type { CallToolResult, Progress } from '@modelcontextprotocol/sdk/types.js';
import { expect, it } from 'vitest';
import { describeDocker, dockerConfigYaml, dockerSuiteHooks, installs } from '../helpers/docker-e2e.js';
import { httpConn, type McpConn } from '../helpers/mcp-clients.js';
import { createToken, ServeProcess, stopAll } from '../helpers/serve.js';

/*
 * MCP on a real `berth serve` over the real engine, with the SDK client and a bearer token:
 * output streamed as progress notifications while `terminal` runs, images from `read_file` as
 * image content (by magic bytes, capped), and the per-tenant limit on open MCP sessions.
 */

const reg = installs('berth-mcp-serve-');

/** A 1x1 PNG. */
const PNG_BASE64 = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==';

async function tool(conn: McpConn, name: string, args: Record<string, unknown>, onprogress?: (p: Progress) => void): Promise<CallToolResult> {
  return await conn.client.callTool({ name, arguments: args }, undefined, { timeout: 60_000, ...(onprogress ? { onprogress } : {}) }) as CallToolResult;
}

function textOf(r: CallToolResult): string {
  return (r.content as { type: string; text?: string }[]).filter((c) => c.type === 'text').map((c) => c.text).join('\n');
}

describeDocker('MCP on berth serve (docker): progress, images, session limit', () => {
  dockerSuiteHooks(reg, stopAll);

  it('terminal streams its output as progress notifications before the result, when the client asked for progress', async () => {
    const t = reg.track();
    t.writeConfig(dockerConfigYaml({ persistent: false }));
    const token = await createToken(t, 'acme');
    const server = await ServeProcess.start(t);
    const conn = await httpConn(new URL(`${server.url}/mcp`), { token });
    try {
      const seen: Progress[] = [];
      const r = await tool(conn, 'terminal', { command: 'for i in 1 2 3; do echo line-$i; sleep 0.2; done; echo err-x >&2' }, (p) => seen.push(p));
      expect(r.isError ?? false, textOf(r)).toBe(false);
      expect(seen.length).toBeGreaterThanOrEqual(2);
      expect(seen.filter((p) => !p.message?.startsWith('[stderr] ')).map((p) => p.message).join('')).toBe('line-1\nline-2\nline-3\n');
      expect(seen.filter((p) => p.message?.startsWith('[stderr] ')).map((p) => p.message).join('')).toBe('[stderr] err-x\n');
      const progress = seen.map((p) => p.progress);
      expect(progress).toEqual([...progress].sort((a, b) => a - b));
      expect(new Set(progress).size).toBe(progress.length);
      expect(progress.at(-1)).toBe('line-1\nline-2\nline-3\nerr-x\n'.length);

      // No progress token, no notifications: the plain call still answers the whole output.
      const plain = await tool(conn, 'terminal', { command: 'echo quiet' });
      expect(textOf(plain)).toContain('quiet');
    } finally {
      await conn.close();
      await server.stop();
    }
  });

  it('read_file returns PNG/GIF/WebP/JPEG as image content by magic bytes, text as text, and refuses an image over 5 MiB with the fix', async () => {
    const t = reg.track();
    t.writeConfig(dockerConfigYaml({ persistent: false }));
    const token = await createToken(t, 'acme');
    const server = await ServeProcess.start(t);
    const conn = await httpConn(new URL(`${server.url}/mcp`), { token });
    try {
      expect((await tool(conn, 'write_file', { path: '/tmp/chart.dat', content: PNG_BASE64, encoding: 'base64' })).isError ?? false).toBe(false);
      const png = await tool(conn, 'read_file', { path: '/tmp/chart.dat' });
      expect(png.isError ?? false).toBe(false);
      expect(png.content[0]).toEqual({ type: 'image', data: PNG_BASE64, mimeType: 'image/png' });
      expect(png.structuredContent).toMatchObject({ encoding: 'image', mimeType: 'image/png', bytes: Buffer.from(PNG_BASE64, 'base64').length });

      const gif = Buffer.concat([Buffer.from('GIF89a', 'latin1'), Buffer.alloc(20, 1)]);
      const webp = Buffer.concat([Buffer.from('RIFF', 'latin1'), Buffer.alloc(4), Buffer.from('WEBPVP8 ', 'latin1'), Buffer.alloc(8)]);
      const jpeg = Buffer.from([0xff, 0xd8, 0xff, 0xe0, 0, 0x10, 0x4a, 0x46]);
      for (const [name, data, mime] of [['g', gif, 'image/gif'], ['w', webp, 'image/webp'], ['j', jpeg, 'image/jpeg']] as const) {
        await tool(conn, 'write_file', { path: `/tmp/${name}`, content: data.toString('base64'), encoding: 'base64' });
        const r = await tool(conn, 'read_file', { path: `/tmp/${name}` });
        expect(r.content[0], name).toEqual({ type: 'image', data: data.toString('base64'), mimeType: mime });
      }

      // The name says png, the bytes say text: text it is.
      await tool(conn, 'write_file', { path: '/tmp/fake.png', content: 'not an image\n' });
      const fake = await tool(conn, 'read_file', { path: '/tmp/fake.png' });
      expect(fake.content).toEqual([{ type: 'text', text: 'not an image\n' }]);

      const big = await tool(conn, 'terminal', { command: "printf '\\x89PNG\\r\\n\\x1a\\n' > /tmp/big.png && head -c 6291456 /dev/zero >> /tmp/big.png && wc -c < /tmp/big.png" });
      expect(textOf(big)).toContain('6291464');
      const refused = await tool(conn, 'read_file', { path: '/tmp/big.png' });
      expect(refused.isError).toBe(true);
      expect(refused.content.some((c) => c.type === 'image')).toBe(false);
      expect(textOf(refused)).toContain('(too_large)');
      expect(textOf(refused)).toContain('6291464 bytes, over the 5242880 bytes (5 MiB)');
      expect(textOf(refused)).toContain('export_file');
    } finally {
      await conn.close();
      await server.stop();
    }
  });

  it('the resource berth://session/jobs lists this session\'s background jobs, and no other session\'s', async () => {
    const t = reg.track();
    t.writeConfig(dockerConfigYaml({ persistent: false }));
    const token = await createToken(t, 'acme');
    const server = await ServeProcess.start(t);
    const url = new URL(`${server.url}/mcp`);
    const mine = await httpConn(url, { token });
    const other = await httpConn(url, { token });
    try {
      const listed = await mine.client.listResources();
      expect(listed.resources.map((r) => [r.uri, r.mimeType]).sort()).toEqual([['berth://session/egress', 'application/json'], ['berth://session/jobs', 'application/json']]);
      const started = await tool(mine, 'terminal', { command: 'sleep 300', background: true });
      const jobId = (started.structuredContent as { jobId: string }).jobId;
      const read = await mine.client.readResource({ uri: 'berth://session/jobs' });
      const jobs = JSON.parse((read.contents[0] as { text: string }).text) as { jobId: string; status: string; command: string }[];
      expect(jobs.map((j) => [j.jobId, j.status, j.command])).toEqual([[jobId, 'running', 'sleep 300']]);
      const theirs = await other.client.readResource({ uri: 'berth://session/jobs' });
      expect(JSON.parse((theirs.contents[0] as { text: string }).text)).toEqual([]);
    } finally {
      await mine.close();
      await other.close();
      await server.stop();
    }
  });

  it('limits.mcpSessions bounds one tenant\'s open MCP sessions (429 naming the limit and the fix); other tenants are not affected; an ended session frees its slot', async () => {
    const t = reg.track();
    t.writeConfig(dockerConfigYaml({ persistent: false, limits: { mcpSessions: 2 } }));
    const acme = await createToken(t, 'acme');
    const beta = await createToken(t, 'beta');
    const server = await ServeProcess.start(t);
    const url = new URL(`${server.url}/mcp`);
    const open: McpConn[] = [];
    try {
      open.push(await httpConn(url, { token: acme }), await httpConn(url, { token: acme }));
      const third = await httpConn(url, { token: acme }).then(() => undefined, (e: unknown) => e as Error);
      expect(third, 'a third MCP session of acme was accepted').toBeInstanceOf(Error);
      expect(third?.message).toContain('too_many_calls');
      expect(third?.message).toContain('2 MCP sessions open, the most limits.mcpSessions allows');
      // A raw initialize gets the same answer as plain HTTP: 429 with the error body.
      const raw = await fetch(url, {
        method: 'POST',
        headers: { authorization: `Bearer ${acme}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
        body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'x', version: '0' } } }),
      });
      expect(raw.status).toBe(429);
      expect(((await raw.json()) as { error: { code: string } }).error.code).toBe('too_many_calls');

      open.push(await httpConn(url, { token: beta }));
      expect(textOf(await tool(open[2]!, 'terminal', { command: 'echo beta-ok' }))).toContain('beta-ok');

      await open.shift()!.close();
      open.push(await httpConn(url, { token: acme }));
      expect(textOf(await tool(open.at(-1)!, 'terminal', { command: 'echo acme-again' }))).toContain('acme-again');
    } finally {
      for (const c of open) await c.close().catch(() => undefined);
      await server.stop();
    }
  });
});
