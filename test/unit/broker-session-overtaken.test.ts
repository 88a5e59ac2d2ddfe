import { describe, expect, it } from 'vitest';
import type { ResolvedCall } from '../../src/broker/resolve-call.js';
import { SessionCalls, sessionKey } from '../../src/broker/session-calls.js';
import { SessionGate } from '../../src/broker/session-gate.js';
import { BerthError, type ErrorCode } from '../../src/errors.js';

/*
 * A call of a session that a close overtook: what it fails with afterwards. An error of the
 * caller's own making (its input, a refusal, a bound) says the same with or without the close and
 * is reported as it is; any other failure is the close's doing and says so (session_closed).
 */

const CALL = { scope: { tenant: 'acme', profile: 'default', session: 's1' }, sessionRef: 's1' } as unknown as ResolvedCall;

/** A gate whose pool is never reached: the calls here fail before they need a sandbox. */
function gate(): { gate: SessionGate; calls: SessionCalls } {
  const calls = new SessionCalls();
  const pool = { acquire: () => Promise.reject(new Error('no sandbox in this test')) };
  return { gate: new SessionGate({ calls, pool }), calls };
}

/** What a call fails with when the session's close began while it ran and it then threw `code`. */
async function overtakenWith(code: ErrorCode): Promise<string> {
  const { gate: g, calls } = gate();
  const err = await g.run(CALL, async () => {
    calls.overtake(sessionKey('acme', 'default', 's1'));
    throw new BerthError(code, `failed with ${code}`);
  }).catch((e: unknown) => e as BerthError);
  return err.code;
}

describe('a call overtaken by its session\'s close', () => {
  it.each<ErrorCode>(['offset_out_of_range', 'usage', 'upload_incomplete', 'policy_refused', 'too_large', 'tenant_limit'])(
    '%s is the caller\'s own and is reported as it is',
    async (code) => {
      expect(await overtakenWith(code)).toBe(code);
    },
  );

  it.each<ErrorCode>(['spawn_failed', 'not_found', 'shell_closed', 'engine_refused'])('%s is the close\'s doing: session_closed', async (code) => {
    expect(await overtakenWith(code)).toBe('session_closed');
  });

  it('a call no close overtook fails with its own error', async () => {
    const err = await gate().gate.run(CALL, async () => {
      throw new BerthError('spawn_failed', 'x');
    }).catch((e: unknown) => e as BerthError);
    expect(err.code).toBe('spawn_failed');
  });
});
