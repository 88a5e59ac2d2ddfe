import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import { expect, it } from 'vitest';
import { REPO } from '../helpers/cli.js';
import { describeDocker, dockerSuiteHooks, installs, waitFor } from '../helpers/docker-e2e.js';

/*
 * The README's Quick start, run as written and in its order, against the real engine: its shell
 * blocks through bash from the checkout, its MCP client configs through the SDK's own client
 * transports, its TypeScript through node. The one change: "npm ci" is not re-run (this checkout's
 * install is shared; CI installs before it runs the suite), the demo after it is.
 */

const reg = installs('berth-quick-start-');

interface Block { lang: string; text: string }

/** The fenced blocks of the README's "## Quick start" section, in order. */
function quickStartBlocks(): Block[] {
  const readme = readFileSync(join(REPO, 'README.md'), 'utf8');
  const start = readme.indexOf('\n## Quick start\n');
  const section = readme.slice(start, readme.indexOf('\n## ', start + 1));
  return [...section.matchAll(/^```(\w+)\n([\s\S]*?)^```$/gm)].map((m) => ({ lang: m[1]!, text: m[2]! }));
}

interface Shell { child: ChildProcess; stdout: () => string; stderr: () => string; done: Promise<number> }

/** Runs a block with bash from the checkout, in its own process group (a block may leave a server running). */
function bash(script: string, env: NodeJS.ProcessEnv): Shell {
  const child = spawn('bash', ['-e', '-c', script], { cwd: REPO, env, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout!.setEncoding('utf8').on('data', (d: string) => (stdout += d));
  child.stderr!.setEncoding('utf8').on('data', (d: string) => (stderr += d));
  const done = new Promise<number>((resolve) => child.on('exit', (code) => resolve(code ?? -1)));
  return { child, stdout: () => stdout, stderr: () => stderr, done };
}

async function runBlock(script: string, env: NodeJS.ProcessEnv): Promise<{ stdout: string; stderr: string }> {
  const sh = bash(script, env);
  const code = await sh.done;
  expect(code, `block failed:\n${script}\nstdout: ${sh.stdout()}\nstderr: ${sh.stderr()}`).toBe(0);
  return { stdout: sh.stdout(), stderr: sh.stderr() };
}

/** Connects an MCP client over `transport`, runs one terminal call, and closes. */
async function terminalCall(transport: Transport, command: string): Promise<{ text: string; isError: boolean }> {
  const client = new Client({ name: 'quick-start-test', version: '0.0.0' });
  await client.connect(transport);
  try {
    const r = await client.callTool({ name: 'terminal', arguments: { command } }, undefined, { timeout: 60_000 });
    const content = (r.content ?? []) as Array<{ text?: string }>;
    return { text: content.map((c) => c.text ?? '').join('\n'), isError: r.isError === true };
  } finally {
    await client.close();
  }
}

describeDocker('the README quick start, as written', () => {
  dockerSuiteHooks(reg);

  it('demo, a first exec, a session, a server with an MCP client, the library', async () => {
    const t = reg.track();
    const env = { ...t.env, BERTH_LOG_LEVEL: 'warn' };
    const blocks = quickStartBlocks();
    expect(blocks.map((b) => b.lang)).toEqual(['sh', 'sh', 'sh', 'sh', 'json', 'json', 'ts']);
    const [demo, first, session, server, httpConfig, stdioConfig, library] = blocks as [Block, Block, Block, Block, Block, Block, Block];

    expect(demo.text).toBe('npm ci && npm run demo\n');
    await runBlock('npm run demo', env);

    const r1 = await runBlock(first.text, env);
    expect(r1.stdout).toMatch(/^Linux /);

    const r2 = await runBlock(session.text, env);
    expect(r2.stdout).toMatch(/^\/tmp\ndraft\nreview\n/);

    const served = bash(server.text, env);
    try {
      expect(await served.done, served.stderr()).toBe(0);
      // token create runs first: its last (only) stdout line is the token.
      const token = served.stdout().split('\n')[0];
      expect(token, served.stdout()).toMatch(/^\S{20,}$/);
      const { mcpServers: { berth: http } } = JSON.parse(httpConfig.text.replace('<token>', token!)) as { mcpServers: { berth: { type: string; url: string; headers: Record<string, string> } } };
      expect(http.type).toBe('http');
      expect(await waitFor(async () => (await fetch(new URL('/v1/health', http.url)).catch(() => undefined))?.ok === true, 30_000)).toBe(true);
      const viaHttp = await terminalCall(new StreamableHTTPClientTransport(new URL(http.url), { requestInit: { headers: http.headers } }), 'echo over http; pwd');
      expect(viaHttp).toMatchObject({ isError: false });
      expect(viaHttp.text).toContain('over http\n');
    } finally {
      if (served.child.pid !== undefined) process.kill(-served.child.pid, 'SIGTERM');
      // The server closes its sessions and stops listening before the test's cleanup removes its home.
      await waitFor(async () => (await fetch('http://127.0.0.1:7878/v1/health').catch(() => undefined)) === undefined, 30_000);
    }

    const { mcpServers: { berth: stdio } } = JSON.parse(stdioConfig.text.replace('/path/to/berth', REPO)) as { mcpServers: { berth: { command: string; args: string[] } } };
    const childEnv: Record<string, string> = {};
    for (const [k, v] of Object.entries(env)) if (v !== undefined) childEnv[k] = v;
    const viaStdio = await terminalCall(new StdioClientTransport({ command: stdio.command, args: stdio.args, env: childEnv, stderr: 'ignore' }), 'echo over stdio');
    expect(viaStdio).toMatchObject({ isError: false });
    expect(viaStdio.text).toContain('over stdio\n');

    // `import 'berth'` resolves to this package from inside its own directory.
    const file = join(REPO, `.quick-start-${randomBytes(4).toString('hex')}.mjs`);
    writeFileSync(file, library.text);
    try {
      const r3 = await runBlock(`node ${file}`, env);
      expect(r3.stdout).toMatch(/^0 \/tmp \.\n\.\.\n/);
    } finally {
      rmSync(file, { force: true });
    }
  }, 300_000);
});
