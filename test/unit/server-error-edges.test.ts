import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js';
import { afterEach, describe, expect, it, onTestFinished, vi } from 'vitest';
import type { Broker } from '../../src/broker/broker.js';
import { COMMANDS } from '../../src/cli/commands/index.js';
import { exitCodeOf } from '../../src/cli/exit-codes.js';
import { main } from '../../src/cli/main.js';
import { BerthError, ConfigError, ERROR_CATEGORY, PolicyRefusedError, UsageError, type ErrorCode } from '../../src/errors.js';
import { TokenStore } from '../../src/server/tokens.js';
import { createMcpServer } from '../../src/server/mcp/server.js';
import type { SandboxDescription } from '../../src/server/mcp/sandbox-description.js';
import { parsePrometheusText, sampleValue } from '../helpers/prom-text.js';
import { startStubServer, stubBroker } from '../helpers/stub-server.js';
import type { LogRecord } from '../../src/logging/logger.js';

/*
 * Each edge answers a berth error by its category (ERROR_CATEGORY): the HTTP status, the CLI exit
 * code, the MCP answer, whether it counts as a refusal. These pin what a client sees, through a
 * real server, a real MCP client and the CLI's own entry point.
 */

const CODES = Object.keys(ERROR_CATEGORY) as ErrorCode[];

/** What a client sees for each code: the HTTP status and the CLI exit code. A change here changes what clients see. */
const ANSWERS: Readonly<Record<ErrorCode, readonly [status: number, exit: number]>> = {
  usage: [400, 2],
  offset_out_of_range: [400, 2],
  upload_incomplete: [400, 2],
  config_invalid: [500, 2],
  policy_refused: [403, 125],
  profile_forbidden: [403, 125],
  host_backend_forbidden: [403, 125],
  host_key_refused: [403, 125],
  not_found: [404, 125],
  path_not_found: [404, 1],
  job_not_found: [404, 125],
  too_large: [413, 125],
  tenant_limit: [429, 125],
  at_capacity: [503, 125],
  disk_limit_exceeded: [507, 125],
  sandbox_busy: [409, 125],
  unsupported: [422, 125],
  backend_unavailable: [503, 125],
  shutting_down: [503, 125],
  shell_closed: [503, 125],
  warden_closed: [503, 125],
  session_closed: [409, 125],
  timeout: [504, 125],
  job_start_failed: [500, 125],
  shell_start_failed: [500, 125],
  sandbox_start_failed: [500, 125],
  spawn_failed: [500, 125],
  warden_gone: [500, 125],
  kill_helper_failed: [500, 125],
  transfer_failed: [500, 125],
  staging_unsafe: [500, 125],
  job_read_failed: [500, 125],
  disk_measure_failed: [500, 125],
  disk_image_failed: [500, 125],
  helper_output_too_large: [500, 125],
  engine_refused: [500, 125],
  invalid_ref: [500, 125],
  image_pull_failed: [500, 125],
  image_build_failed: [500, 125],
  listen_failed: [500, 125],
  internal: [500, 125],
};

/** Codes counted in berth_refusals_total: refused or over a bound, never a failure. */
const REFUSALS: readonly ErrorCode[] = [
  'policy_refused', 'profile_forbidden', 'host_backend_forbidden', 'host_key_refused', 'too_large', 'tenant_limit', 'disk_limit_exceeded',
];

async function post(url: string, token: string, body: unknown, headers: Record<string, string> = {}): Promise<{ status: number; body: { error?: { code: string; message: string } } }> {
  const res = await fetch(url, {
    method: 'POST', body: JSON.stringify(body), headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', ...headers },
  });
  return { status: res.status, body: await res.json() as { error?: { code: string; message: string } } };
}

describe('/v1: a berth error answers the status of its category', () => {
  it('every code, with its code and message, the same on every route; a bug says only that it is one', async () => {
    let code: ErrorCode = 'usage';
    const fail = async () => {
      throw new BerthError(code, `it failed with ${code}; do something else`);
    };
    const { url, token } = await startStubServer(stubBroker({ exec: fail, closeSession: fail }), onTestFinished);
    const seen: Record<string, [number, number]> = {};
    for (code of CODES) {
      const exec = await post(`${url}/v1/exec`, token, { session: 's', command: 'true' });
      const close = await post(`${url}/v1/sessions/close`, token, { session: 's' });
      expect(exec.body.error?.code).toBe(code);
      expect(close.body.error?.code).toBe(code);
      if (code === 'internal') expect(exec.body.error?.message).toMatch(/^berth failed to handle this request: this is a bug in berth/);
      else expect(exec.body.error?.message).toBe(`it failed with ${code}; do something else`);
      seen[code] = [exec.status, close.status];
    }
    expect(seen).toEqual(Object.fromEntries(CODES.map((c) => [c, [ANSWERS[c][0], ANSWERS[c][0]]])));
  });

  it.each<[string, ErrorCode, number]>([
    ['a host key berth may not trust is a refusal, not "retry later" (was 503)', 'host_key_refused', 403],
    ['a job whose start line failed in the sandbox is a failure, not "unsupported" (was 422)', 'job_start_failed', 500],
    ['an engine that answered and refused (docker and kubernetes alike) is a failure, not "unavailable"', 'engine_refused', 500],
  ])('%s', async (_name, code, status) => {
    const { url, token } = await startStubServer(stubBroker({
      exec: async () => {
        throw new BerthError(code, 'what happened; what to do');
      },
    }), onTestFinished);
    expect(await post(`${url}/v1/exec`, token, { command: 'true' })).toEqual({ status, body: { error: { code, message: 'what happened; what to do' } } });
  });

  it('a config the operator must fix is 500; a bug (code internal, or no berth error) is 500 without its message', async () => {
    let err: Error = new ConfigError('profile "x" names a secrets file that was not read; fix env.secretsFile');
    const { url, token } = await startStubServer(stubBroker({
      exec: async () => {
        throw err;
      },
    }), onTestFinished);
    expect(await post(`${url}/v1/exec`, token, { command: 'true' })).toEqual({
      status: 500, body: { error: { code: 'config_invalid', message: 'profile "x" names a secrets file that was not read; fix env.secretsFile' } },
    });
    for (err of [new Error('ENOENT /home/op/.berth/secret-place'), new BerthError('internal', 'staging dir /home/op/.berth/x is not under /srv')]) {
      const r = await post(`${url}/v1/exec`, token, { command: 'true' });
      expect(r.status).toBe(500);
      expect(r.body.error?.code).toBe('internal');
      expect(r.body.error?.message).not.toContain('/home/op');
      expect(r.body.error?.message).toContain('this is a bug in berth');
    }
  });

  it('berth_refusals_total counts refusals and bounds (a refused host key, a sandbox over its disk bound), never a failure', async () => {
    let code: ErrorCode = 'usage';
    const broker = stubBroker({
      exec: async () => {
        throw new BerthError(code, 'x');
      },
      inventory: async () => ({ sandboxes: [], sessions: [] }),
      warmPools: () => [],
      stateBacklog: () => [],
    });
    const { url, token } = await startStubServer(broker, onTestFinished);
    const tokens = TokenStore.open(broker.berthHome);
    const metrics = tokens.createMetrics().token;
    tokens.close();
    for (code of CODES) await post(`${url}/v1/exec`, token, { command: 'true' });
    const res = await fetch(`${url}/metrics`, { headers: { authorization: `Bearer ${metrics}` } });
    const families = parsePrometheusText(await res.text());
    const counted = CODES.filter((c) => sampleValue(families, 'berth_refusals_total', { code: c }) === 1);
    expect(counted.sort()).toEqual([...REFUSALS].sort());
  });
});

describe('/mcp: a refusal before the MCP session exists answers by the same table', () => {
  const INIT = { jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 't', version: '1' } } };
  const MCP_HEADERS = { accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-06-18' };

  it.each<[string, () => Error, number, string]>([
    ['a config that cannot be honoured', () => new ConfigError('scope "shared" needs a sharedKey; set sharedKey'), 500, 'config_invalid'],
    ['a policy refusal', () => new PolicyRefusedError('no'), 403, 'policy_refused'],
    ['a host key berth may not trust (was 503)', () => new BerthError('host_key_refused', 'the host key of build1:22 changed'), 403, 'host_key_refused'],
    ['a thing that is not there', () => new BerthError('not_found', 'image berth-sandbox:x is not built'), 404, 'not_found'],
    ['a usage error', () => new UsageError('bad'), 400, 'usage'],
  ])('%s', async (_name, error, status, code) => {
    const { url, token } = await startStubServer(stubBroker({
      explain: () => {
        throw error();
      },
    }), onTestFinished);
    const r = await post(`${url}/mcp`, token, INIT, MCP_HEADERS);
    expect(r.status).toBe(status);
    expect(r.body.error?.code).toBe(code);
  });

  it('a bug while opening the session is 500 saying only that it is one', async () => {
    const { url, token } = await startStubServer(stubBroker({
      explain: () => {
        throw new BerthError('internal', 'state dir /home/op/.berth is odd');
      },
    }), onTestFinished);
    const r = await post(`${url}/mcp`, token, INIT, MCP_HEADERS);
    expect(r.status).toBe(500);
    expect(r.body.error?.code).toBe('internal');
    expect(r.body.error?.message).not.toContain('/home/op');
  });

  it('a body over the limit is 413 and one that is no JSON 400, as the table says for too_large and bad_request', async () => {
    const { url, token } = await startStubServer(stubBroker(), onTestFinished);
    const big = await fetch(`${url}/mcp`, {
      method: 'POST', body: 'x'.repeat(9 * 1024 * 1024), headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', ...MCP_HEADERS },
    });
    expect(big.status).toBe(413);
    const bad = await fetch(`${url}/mcp`, {
      method: 'POST', body: '{"not json', headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', ...MCP_HEADERS },
    });
    expect(bad.status).toBe(400);
  });

  it('a profile the token may not use is 403 before the broker is asked', async () => {
    const { url, token } = await startStubServer(stubBroker(), onTestFinished);
    const r = await post(`${url}/mcp`, token, INIT, { ...MCP_HEADERS, 'x-berth-profile': 'other' });
    expect(r).toMatchObject({ status: 403, body: { error: { code: 'profile_forbidden' } } });
  });
});

describe('MCP tools: what a tool throws is a result the agent reads', () => {
  const SANDBOX = { session: 'mcp-1', defaultTimeoutSeconds: 10, summary: 'A test sandbox.', instructions: 'Test.' } as unknown as SandboxDescription;

  async function connect(exec: () => Promise<never>): Promise<{ client: Client; logged: string[]; records: LogRecord[]; refused: string[] }> {
    const logged: string[] = [];
    const records: LogRecord[] = [];
    const refused: string[] = [];
    const broker = { exec } as unknown as Broker;
    const server = createMcpServer(broker, { session: 'mcp-1' }, {
      sandbox: SANDBOX, log: (ns, m, r) => { logged.push(`${ns} ${m}`); if (r !== undefined) records.push(r); }, onRefused: (code) => refused.push(code),
    });
    const [a, b] = InMemoryTransport.createLinkedPair();
    await server.connect(a);
    const client = new Client({ name: 't', version: '1' });
    await client.connect(b);
    onTestFinished(async () => {
      await client.close();
      await server.close();
    });
    return { client, logged, records, refused };
  }

  function textOf(r: Awaited<ReturnType<Client['callTool']>>): string {
    return (r.content as { type: string; text: string }[]).map((c) => c.text).join('\n');
  }

  it('every berth error but a bug is an isError result with its code and message; refusals are counted', async () => {
    let code: ErrorCode = 'usage';
    const { client, refused } = await connect(async () => {
      throw new BerthError(code, `it failed with ${code}`);
    });
    for (code of CODES.filter((c) => c !== 'internal')) {
      const r = await client.callTool({ name: 'terminal', arguments: { command: 'true' } });
      expect(r.isError).toBe(true);
      expect(textOf(r)).toBe(`berth could not run this call (${code}): it failed with ${code}`);
    }
    expect(refused.sort()).toEqual([...REFUSALS].sort());
  });

  it('a bug (code internal, or no berth error) is an isError result saying it is a bug in berth; its stack goes to the log, not to the agent', async () => {
    let err: Error = new Error('ENOENT /home/op/.berth/secret-place');
    const { client, logged, records } = await connect(async () => {
      throw err;
    });
    for (const e of [err, new BerthError('internal', 'staging dir /home/op/.berth/x is not under /srv')]) {
      err = e;
      const r = await client.callTool({ name: 'terminal', arguments: { command: 'true' } });
      expect(r.isError).toBe(true);
      expect(textOf(r)).toContain('this is a bug in berth');
      expect(textOf(r)).not.toContain('/home/op');
    }
    expect(logged).toHaveLength(2);
    expect(logged[0]).toMatch(/^berth:mcp terminal: Error: ENOENT \/home\/op\/\.berth\/secret-place\n/);
    // At error, with the stack as a field: the default level shows it.
    expect(records[0]).toMatchObject({ level: 'error', component: 'berth:mcp', msg: 'terminal: Error: ENOENT /home/op/.berth/secret-place' });
    expect(String(records[0]!.fields?.['stack'])).toMatch(/^Error: ENOENT \/home\/op\/\.berth\/secret-place\n\s+at /);
  });
});

describe('the CLI exit code of each code', () => {
  afterEach(() => {
    vi.restoreAllMocks();
  });

  it('2 for the caller\'s own input and the config, 1 for a sandbox path that is not there (as cp), 125 for the rest', () => {
    expect(Object.fromEntries(CODES.map((c) => [c, exitCodeOf(c)]))).toEqual(Object.fromEntries(CODES.map((c) => [c, ANSWERS[c][1]])));
  });

  async function run(err: unknown): Promise<{ code: number; stderr: string }> {
    vi.spyOn(COMMANDS, 'ls').mockReturnValue(Promise.resolve(async () => {
      throw err;
    }));
    let stderr = '';
    const code = await main(['ls'], { out: () => undefined, err: (s: string) => void (stderr += s), env: {}, cwd: '/' } as never);
    return { code, stderr };
  }

  it('a berth error is one line with its message and its code\'s exit code', async () => {
    expect(await run(new BerthError('host_key_refused', 'the host key of build1:22 changed; check known_hosts'))).toEqual({
      code: 125, stderr: 'berth: the host key of build1:22 changed; check known_hosts\n',
    });
    expect(await run(new UsageError('--tenant needs a value'))).toEqual({ code: 2, stderr: 'berth: --tenant needs a value\n' });
  });

  it('a bug (code internal, or no berth error) exits 125 saying it is a bug in berth and how to report it', async () => {
    for (const err of [new BerthError('internal', 'a staging lease used after it ended'), new TypeError('x is undefined')]) {
      const r = await run(err);
      expect(r.code).toBe(125);
      expect(r.stderr).toMatch(/^berth: internal error: .+; this is a bug in berth, not in your command or config; please report it with the command you ran and the output of the same run with BERTH_DEBUG=\*\n$/);
    }
  });
});
