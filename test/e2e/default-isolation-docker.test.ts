import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { expect, it } from 'vitest';
import { runBerth } from '../helpers/cli.js';
import { describeDocker, dockerSuiteHooks, installs, IMAGE } from '../helpers/docker-e2e.js';
import { httpConn } from '../helpers/mcp-clients.js';
import { createToken, ServeProcess, stopAll } from '../helpers/serve.js';

/*
 * With no keying settings at all (the config names only the test image, so the defaults decide
 * every key), each session gets its own sandbox, on every surface: the CLI, HTTP and MCP. Sharing
 * one sandbox across sessions is the one explicit line `scope: profile`.
 */

const reg = installs('berth-default-isolation-');
const ONLY_IMAGE = `docker:\n  image: ${IMAGE}\n`;

describeDocker('isolation by default (docker)', () => {
  dockerSuiteHooks(reg, stopAll);

  it('CLI: two sessions see each other\'s files only after scope: profile, and explain says so', async () => {
    const t = reg.track();
    t.writeConfig(ONLY_IMAGE);
    const berth = (...args: string[]) => runBerth(args, { env: t.env, cwd: t.dir, timeoutMs: 90_000 });
    const explained = JSON.parse((await berth('explain', '--json', '--session', 's1')).stdout) as Record<string, unknown>;
    expect(explained).toMatchObject({ sandboxKey: 'session:s1', rule: 'auto:5', persistent: false });
    expect(await berth('exec', '--session', 's1', '--', 'echo mine > /workspace/f')).toMatchObject({ code: 0 });
    expect(await berth('exec', '--session', 's2', '--', 'cat /workspace/f 2>/dev/null || echo unseen')).toMatchObject({ code: 0, stdout: 'unseen\n' });
    expect(await berth('close', '--session', 's1')).toMatchObject({ code: 0 });
    expect(await berth('close', '--session', 's2')).toMatchObject({ code: 0 });

    t.writeConfig(`${ONLY_IMAGE}scope: profile\n`);
    expect(JSON.parse((await berth('explain', '--json', '--session', 's1')).stdout)).toMatchObject({ sandboxKey: 'default', rule: 'profile', persistent: true });
    expect(await berth('exec', '--session', 's1', '--', 'echo ours > /workspace/f')).toMatchObject({ code: 0 });
    expect(await berth('exec', '--session', 's2', '--', 'cat /workspace/f')).toMatchObject({ code: 0, stdout: 'ours\n' });
    expect(await berth('rm')).toMatchObject({ code: 0 });
  });

  it('HTTP and MCP: two sessions of one token get two sandboxes', async () => {
    const t = reg.track();
    t.writeConfig(ONLY_IMAGE);
    const token = await createToken(t, 'acme');
    const server = await ServeProcess.start(t);
    const api = server.client(token);
    const w = await api.post('/v1/exec', { session: 'h1', command: 'echo mine > /workspace/f; echo ok' });
    expect(w.status, JSON.stringify(w.body)).toBe(200);
    expect(w.body).toMatchObject({ stdout: 'ok\n', sandboxKey: 'session:h1' });
    const r = await api.post('/v1/exec', { session: 'h2', command: 'cat /workspace/f 2>/dev/null || echo unseen' });
    expect(r.body).toMatchObject({ stdout: 'unseen\n', sandboxKey: 'session:h2' });
    const e = await api.post('/v1/explain', { session: 'h2' });
    expect(e.body).toMatchObject({ sandboxKey: 'session:h2', persistent: false });

    const url = new URL(`${server.url}/mcp`);
    const a = await httpConn(url, { token });
    const b = await httpConn(url, { token });
    try {
      const text = (res: unknown) => ((res as CallToolResult).content as { type: string; text?: string }[]).map((c) => c.text ?? '').join('\n');
      const wrote = await a.client.callTool({ name: 'terminal', arguments: { command: 'echo mine > /workspace/m; echo ok' } });
      expect(text(wrote)).toContain('ok');
      const read = await b.client.callTool({ name: 'terminal', arguments: { command: 'cat /workspace/m 2>/dev/null || echo unseen' } });
      expect(text(read)).toContain('unseen');
      expect(text(read)).not.toContain('mine');
    } finally {
      await a.close();
      await b.close();
      await server.stop();
    }
  });
});
