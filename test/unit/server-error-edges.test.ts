import { describe, expect, it, onTestFinished } from 'vitest';
import { EXIT_CODE } from '../../src/cli/exit-codes.js';
import { BerthError, ConfigError, PolicyRefusedError, UsageError, type ErrorCode } from '../../src/errors.js';
import { PathNotFoundError } from '../../src/files/errors.js';
import { HTTP_STATUS } from '../../src/server/http-error.js';
import { ProfileForbiddenError } from '../../src/server/caller.js';
import { startStubServer, stubBroker } from '../helpers/stub-server.js';

/*
 * Each edge answers a berth error by its code, from one table (HTTP_STATUS, EXIT_CODE,
 * MCP_ERROR_KIND). These pin what a client sees, through a real server.
 */

const CODES = Object.keys(EXIT_CODE) as ErrorCode[];

async function post(url: string, token: string, body: unknown, headers: Record<string, string> = {}): Promise<{ status: number; body: { error?: { code: string; message: string } } }> {
  const res = await fetch(url, {
    method: 'POST', body: JSON.stringify(body), headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', ...headers },
  });
  return { status: res.status, body: await res.json() as { error?: { code: string; message: string } } };
}

describe('/v1: a berth error answers the status of its code', () => {
  it('every code, with its code and message, the same on every route', async () => {
    let code: ErrorCode = 'usage';
    const fail = async () => {
      throw new BerthError(code, `it failed with ${code}; do something else`);
    };
    const { url, token } = await startStubServer(stubBroker({ exec: fail, closeSession: fail }), onTestFinished);
    const seen: Record<string, [number, number]> = {};
    for (code of CODES) {
      const exec = await post(`${url}/v1/exec`, token, { session: 's', command: 'true' });
      const close = await post(`${url}/v1/sessions/close`, token, { session: 's' });
      expect(exec.body.error).toEqual({ code, message: `it failed with ${code}; do something else` });
      expect(close.body.error?.code).toBe(code);
      seen[code] = [exec.status, close.status];
    }
    expect(seen).toEqual(Object.fromEntries(CODES.map((c) => [c, [HTTP_STATUS[c], HTTP_STATUS[c]]])));
  });

  it('codes that used to answer 500 answer their own status (warden_closed: 503, retry on a running berth)', async () => {
    const { url, token } = await startStubServer(stubBroker({
      exec: async () => {
        throw new BerthError('warden_closed', 'the sandbox is closing; its warden is gone');
      },
    }), onTestFinished);
    expect((await post(`${url}/v1/exec`, token, { command: 'true' })).status).toBe(503);
  });

  it('a config the operator must fix is 500; what is no berth error is 500 without its message', async () => {
    let err: Error = new ConfigError('profile "x" names a secrets file that was not read; fix env.secretsFile');
    const { url, token } = await startStubServer(stubBroker({
      exec: async () => {
        throw err;
      },
    }), onTestFinished);
    expect(await post(`${url}/v1/exec`, token, { command: 'true' })).toEqual({
      status: 500, body: { error: { code: 'config_invalid', message: 'profile "x" names a secrets file that was not read; fix env.secretsFile' } },
    });
    err = new Error('ENOENT /home/op/.berth/secret-place');
    const r = await post(`${url}/v1/exec`, token, { command: 'true' });
    expect(r.status).toBe(500);
    expect(r.body.error?.code).toBe('internal');
    expect(r.body.error?.message).not.toContain('/home/op');
  });
});

describe('/mcp: a refusal before the MCP session exists answers by the same table', () => {
  const INIT = { jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 't', version: '1' } } };
  const MCP_HEADERS = { accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-06-18' };

  it.each<[string, () => Error, number, string]>([
    ['a config that cannot be honoured (was 400 on /mcp, 500 on /v1)', () => new ConfigError('scope "shared" needs a sharedKey; set sharedKey'), 500, 'config_invalid'],
    ['a policy refusal', () => new PolicyRefusedError('no'), 403, 'policy_refused'],
    ['a code /mcp used to answer 500 (not_found)', () => new BerthError('not_found', 'image berth-sandbox:x is not built'), 404, 'not_found'],
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

  it('a profile the token may not use is 403 before the broker is asked', async () => {
    const { url, token } = await startStubServer(stubBroker(), onTestFinished);
    const r = await post(`${url}/mcp`, token, INIT, { ...MCP_HEADERS, 'x-berth-profile': 'other' });
    expect(r).toMatchObject({ status: 403, body: { error: { code: 'profile_forbidden' } } });
  });
});

describe('the CLI exit code of each code', () => {
  it('2 for the caller\'s own input, 1 for a sandbox path that is not there (as cp), 125 for the rest', () => {
    expect(new UsageError('x').exitCode).toBe(2);
    expect(new ConfigError('x').exitCode).toBe(2);
    expect(new BerthError('offset_out_of_range', 'x').exitCode).toBe(2);
    expect(new BerthError('upload_incomplete', 'x').exitCode).toBe(2);
    expect(new PathNotFoundError('x').exitCode).toBe(1);
    expect(new ProfileForbiddenError('x').exitCode).toBe(125);
    const others = CODES.filter((c) => !['usage', 'config_invalid', 'offset_out_of_range', 'upload_incomplete', 'path_not_found'].includes(c));
    expect(new Set(others.map((c) => EXIT_CODE[c]))).toEqual(new Set([125]));
  });
});
