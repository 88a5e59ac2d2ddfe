import { afterEach, describe, expect, it, onTestFinished } from 'vitest';
import { BerthError, type ErrorCode } from '../../src/errors.js';
import { BerthServer } from '../../src/server/server.js';
import { TokenStore } from '../../src/server/tokens.js';
import type { LogRecord } from '../../src/logging/logger.js';
import { tempInstall } from '../helpers/cli.js';
import { ApiClient, createToken, ServeProcess, stopAll } from '../helpers/serve.js';
import { stubBroker } from '../helpers/stub-server.js';

/*
 * What `berth serve` tells its operator: one line per request when it ends (method, path,
 * tenant, status, duration, id) at info, refusals at warn, berth's own faults at error with the
 * stack; never the token or the command text.
 */

afterEach(stopAll);

interface Line { level: string; component: string; msg: string; [k: string]: unknown }

const COMMAND_MARK = 'echo command-text-7f3a';

describe('berth serve request lines (local backend, real server process)', () => {
  it('one JSON line per request at info with its fields, a 403 and a 401 at warn, and no token or command text', async () => {
    using t = tempInstall('backend: local\npersistent: false\nserver:\n  allowHostBackend: true\n');
    const token = await createToken(t, 'acme');
    const server = await ServeProcess.start(t);
    const api = new ApiClient(server.url, token);
    expect((await api.request('POST', '/v1/exec?x=query-9c1', { session: 's1', command: COMMAND_MARK })).status).toBe(200);
    expect((await api.request('GET', '/metrics')).status).toBe(403);
    expect((await new ApiClient(server.url, 'wrong-token').request('GET', '/v1/sessions')).status).toBe(401);
    await server.stop();

    const lines = server.stderr.split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as Line);
    const requests = lines.filter((l) => l.component === 'berth:server' && typeof l['status'] === 'number');
    expect(requests).toEqual([
      expect.objectContaining({ level: 'info', msg: 'POST /v1/exec 200', method: 'POST', path: '/v1/exec', tenant: 'acme', status: 200, ms: expect.any(Number), id: expect.any(Number) }),
      expect.objectContaining({ level: 'warn', msg: 'GET /metrics 403', status: 403 }),
      expect.objectContaining({ level: 'warn', msg: 'GET /v1/sessions 401', status: 401 }),
    ]);
    expect(typeof requests[0]!['time']).toBe('string');
    expect(server.stderr).not.toContain(token);
    expect(server.stderr).not.toContain('wrong-token');
    expect(server.stderr).not.toContain('command-text-7f3a');
    expect(server.stderr).not.toContain('query-9c1');
  });
});

/** An in-process server over a stub broker whose exec is `exec`: a client of tenant acme, and every log record. */
async function serveStub(exec: () => Promise<never>): Promise<{ api: ApiClient; lines: LogRecord[] }> {
  const broker = stubBroker({ exec });
  const tokens = TokenStore.open(broker.berthHome);
  const { token } = tokens.create('acme');
  const lines: LogRecord[] = [];
  const server = await BerthServer.start({ broker, tokens, port: 0, log: (_ns, _m, r) => void lines.push(r!) });
  onTestFinished(async () => {
    await server.close({ graceMs: 1_000 });
    tokens.close();
  });
  return { api: new ApiClient(server.url, token), lines };
}

describe('berth\'s own fault (in-process server)', () => {
  it('an internal error is one error line with its stack', async () => {
    const { api, lines } = await serveStub(async () => { throw new Error('boom in berth'); });
    const r = await api.request('POST', '/v1/exec', { session: 's1', command: 'true' });
    expect(r.status).toBe(500);
    await new Promise((resolve) => setTimeout(resolve, 50));
    const errors = lines.filter((l) => l.level === 'error');
    expect(errors).toHaveLength(1);
    expect(errors[0]!.fields).toMatchObject({ status: 500, error: 'internal: boom in berth' });
    expect(String(errors[0]!.fields?.['stack'])).toMatch(/^Error: boom in berth\n\s+at /);
  });

  it('a request line\'s level follows its error code\'s category: bounds, refusals and timeouts warn, a caller\'s mistake info, an engine\'s failure or absence error without a stack', async () => {
    let code: ErrorCode = 'timeout';
    const { api, lines } = await serveStub(async () => { throw new BerthError(code, `a ${code} from the stub`); });
    const seen: [ErrorCode, number, string | undefined, unknown][] = [];
    for (code of ['timeout', 'too_large', 'disk_limit_exceeded', 'tenant_limit', 'backend_unavailable', 'usage', 'engine_refused'] as ErrorCode[]) {
      const r = await api.request('POST', '/v1/exec', { session: 's1', command: 'true' });
      await new Promise((resolve) => setTimeout(resolve, 20));
      const line = lines.filter((l) => typeof l.fields?.['status'] === 'number').at(-1);
      seen.push([code, r.status, line?.level, line?.fields?.['stack']]);
    }
    expect(seen).toEqual([
      ['timeout', 504, 'warn', undefined],
      ['too_large', 413, 'warn', undefined],
      ['disk_limit_exceeded', 507, 'warn', undefined],
      ['tenant_limit', 429, 'warn', undefined],
      ['backend_unavailable', 503, 'error', undefined],
      ['usage', 400, 'info', undefined],
      ['engine_refused', 500, 'error', undefined],
    ]);
    expect(lines.filter((l) => typeof l.fields?.['status'] === 'number').map((l) => l.fields?.['code'])).toEqual(
      ['timeout', 'too_large', 'disk_limit_exceeded', 'tenant_limit', 'backend_unavailable', 'usage', 'engine_refused']);
  });
});
