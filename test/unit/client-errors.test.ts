import { describe, expect, it } from 'vitest';
import { BerthClient } from '../../src/client.js';
import { errorOfAnswer, RemoteCallError } from '../../src/client/remote-error.js';
import { BerthError } from '../../src/errors.js';

/*
 * What a berth server's failure answer becomes on the client (pure translation; the e2e suite
 * checks the same over a real server), and the client's own refusals at construction.
 */

describe('errorOfAnswer: a server\'s error answer as the library\'s BerthError', () => {
  it.each([
    // A berth code comes through as it is.
    [404, 'path_not_found', 'path_not_found'],
    [403, 'profile_forbidden', 'profile_forbidden'],
    [504, 'timeout', 'timeout'],
    // The HTTP layer's own codes become the berth code of their category.
    [400, 'bad_request', 'usage'],
    [411, 'length_required', 'usage'],
    [401, 'unauthorized', 'policy_refused'],
    [429, 'too_many_calls', 'tenant_limit'],
    [429, 'too_many_bytes', 'tenant_limit'],
    // A code this client does not know (a newer server) is kept on the wire code, under `internal`.
    [500, 'brand_new_code', 'internal'],
  ])('%i %s is code %s, with the wire code and status kept', (status, wire, code) => {
    const e = errorOfAnswer(status, { error: { code: wire, message: 'what happened; the fix' } }, 'POST /v1/exec');
    expect(e).toBeInstanceOf(BerthError);
    expect(e).toBeInstanceOf(RemoteCallError);
    expect(e).toMatchObject({ code, wireCode: wire, status, message: 'what happened; the fix' });
  });

  it('an answer without a berth error (a proxy in between) says so: 502-504 may be retried, anything else is internal', () => {
    expect(errorOfAnswer(502, '<html>Bad Gateway</html>', 'GET /v1/jobs')).toMatchObject({
      code: 'backend_unavailable', status: 502, message: expect.stringMatching(/^GET \/v1\/jobs answered HTTP 502 without a berth error.*Bad Gateway/),
    });
    expect(errorOfAnswer(500, '', 'GET /v1/jobs')).toMatchObject({ code: 'internal', status: 500 });
    expect(errorOfAnswer(418, { error: 'not the shape' }, 'GET /v1/jobs')).toMatchObject({ code: 'internal', status: 418 });
  });
});

describe('BerthClient: refused at construction, before any request', () => {
  it.each([
    [{ url: 'not a url', token: 't' }, /url "not a url" is not a URL/],
    [{ url: 'ftp://127.0.0.1:7878', token: 't' }, /is not http or https/],
    [{ url: 'http://127.0.0.1:7878', token: '' }, /needs a token: create one with `berth token create --tenant T`/],
    [{ url: 'http://127.0.0.1:7878', token: '   ' }, /needs a token/],
  ])('%j', (opts, message) => {
    expect(() => new BerthClient(opts)).toThrow(message);
    expect(() => new BerthClient(opts)).toThrow(expect.objectContaining({ code: 'usage' }) as Error);
  });

  it('an answer whose shape the client does not know is a version mismatch, said so (never passed on unchecked)', async () => {
    const fetchStub = (async () => new Response(JSON.stringify({ exitCode: 'zero' }), { status: 200 })) as typeof fetch;
    const s = new BerthClient({ url: 'http://127.0.0.1:1', token: 't', fetch: fetchStub }).session({ session: 's' });
    await expect(s.exec('true')).rejects.toMatchObject({
      code: 'internal', message: expect.stringMatching(/^POST \/v1\/exec answered a shape this client does not know \(exitCode: .*different berth versions/),
    });
  });
});
