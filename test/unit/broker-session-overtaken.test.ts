import { describe, expect, it } from 'vitest';
import type { ResolvedCall } from '../../src/broker/resolve-call.js';
import { SessionRegistry, type SessionRegistryOptions } from '../../src/broker/sessions.js';
import { parseConfig } from '../../src/setup/parse-config.js';
import { BerthError, type ErrorCode } from '../../src/errors.js';
import { tempDir } from '../helpers/temp-dir.js';

/*
 * A call of a session that a close overtook: what it fails with afterwards. An error of the
 * caller's own making (its input, a refusal, a bound) says the same with or without the close and
 * is reported as it is; any other failure is the close's doing and says so (session_closed).
 */

const CALL = { scope: { tenant: 'acme', profile: 'default', session: 's1' }, sessionRef: 's1' } as unknown as ResolvedCall;

function registry(): SessionRegistry {
  // Only what a close of a session with no sandbox touches: nothing is linked, nothing is removed.
  const opts = {
    store: { closeSession: () => [], tasksOfSession: () => [] },
    config: parseConfig({ backend: 'local' }),
    berthHome: tempDir('berth-overtaken-'),
    owner: null,
    pool: { all: () => [] },
    audit: { record: () => undefined },
    log: () => undefined,
  } as unknown as SessionRegistryOptions;
  return new SessionRegistry(opts);
}

/** What a call fails with when the session's close began while it ran and it then threw `code`. */
async function overtakenWith(code: ErrorCode): Promise<string> {
  const sessions = registry();
  const err = await sessions.run(CALL, async () => {
    await sessions.closeRef('acme', 'default', 's1');
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
    const err = await registry().run(CALL, async () => {
      throw new BerthError('spawn_failed', 'x');
    }).catch((e: unknown) => e as BerthError);
    expect(err.code).toBe('spawn_failed');
  });
});
