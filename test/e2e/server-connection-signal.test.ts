import { mkdtempSync, rmSync } from 'node:fs';
import { Agent, request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect, it } from 'vitest';
import { Broker } from '../../src/broker/broker.js';
import { parseConfig } from '../../src/setup/parse-config.js';
import { BerthServer } from '../../src/server/server.js';
import { TokenStore } from '../../src/server/tokens.js';

/*
 * /v1/exec cancels a command through one signal per HTTP connection (handlers.ts). A kept-alive
 * connection carries many calls, so every call must let go of that signal when it ends: a listener
 * left per call would pile up on it (and node warns past ten). The local backend, in this process.
 */

function post(agent: Agent, url: string, token: string, body: unknown): Promise<{ status: number | undefined; text: string; reused: boolean }> {
  return new Promise((resolve, reject) => {
    const req = request(`${url}/v1/exec`, { method: 'POST', agent, headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' } }, (res) => {
      let text = '';
      res.setEncoding('utf8').on('data', (d: string) => (text += d));
      res.on('end', () => resolve({ status: res.statusCode, text, reused: req.reusedSocket }));
    });
    req.on('error', reject);
    req.end(JSON.stringify(body));
  });
}

it('30 calls on one kept-alive connection: each answered, no abort listener left behind (no leak warning)', async () => {
  const home = mkdtempSync(join(tmpdir(), 'berth-conn-signal-'));
  const warnings: string[] = [];
  const onWarning = (w: Error): void => void warnings.push(`${w.name}: ${w.message}`);
  process.on('warning', onWarning);
  const broker = await Broker.open({
    config: parseConfig({ backend: 'local', persistent: false, server: { allowHostBackend: true } }), berthHome: home, env: { PATH: process.env['PATH'] },
  });
  const tokens = TokenStore.open(home);
  const server = await BerthServer.start({ broker, tokens, port: 0 });
  const agent = new Agent({ keepAlive: true, maxSockets: 1 });
  try {
    const { token } = tokens.create('local');
    const answers = [];
    for (let i = 0; i < 30; i++) answers.push(await post(agent, server.url, token, { session: 'kept', command: `echo ${i}` }));
    expect(answers.map((a) => a.status)).toEqual(Array(30).fill(200));
    expect(answers.map((a) => (JSON.parse(a.text) as { stdout: string }).stdout)).toEqual(answers.map((_, i) => `${i}\n`));
    expect(answers.slice(1).every((a) => a.reused)).toBe(true);
    // Warnings are emitted on the next tick.
    await new Promise((r) => setImmediate(r));
    expect(warnings.filter((w) => /MaxListeners/.test(w))).toEqual([]);
  } finally {
    process.off('warning', onWarning);
    agent.destroy();
    await server.close({ graceMs: 1_000 });
    tokens.close();
    await broker.close();
    rmSync(home, { recursive: true, force: true });
  }
});
