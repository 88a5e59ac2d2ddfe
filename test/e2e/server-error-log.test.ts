import { join } from 'node:path';
import { expect, it } from 'vitest';
import { BUILTIN_BACKENDS } from '../../src/backends/registry.js';
import { Broker } from '../../src/broker/broker.js';
import { parseConfig } from '../../src/setup/parse-config.js';
import { BerthServer } from '../../src/server/server.js';
import { TokenStore } from '../../src/server/tokens.js';
import { FakeBackend } from '../fake-backend/fake-backend.js';
import { FakeEngine } from '../fake-backend/fake-engine.js';
import { fakeModule } from '../fake-backend/module.js';
import { tempDir } from '../helpers/temp-dir.js';
import type { LogRecord } from '../../src/logging/logger.js';

/*
 * What a tenant can make berth serve log: a call that fails in its sandbox or engine (here every
 * call, on a backend that went away) is one line per call, never a stack trace a tenant could
 * repeat to flood the operator's log. Only berth's own faults carry a stack. The line is the
 * request's own line (one per request), at error.
 */

it('a failure a tenant can repeat logs one line per call, with its code and message, and no stack', async () => {
  const home = tempDir('berth-error-log-');
  const engine = new FakeEngine();
  const backend = new FakeBackend('fake', engine, 'unused', join(home, 'sandboxes', 'fake'));
  const config = parseConfig({ backend: 'fake', server: { allowHostBackend: true } }, undefined, { backends: BUILTIN_BACKENDS.with(fakeModule(engine)) });
  const broker = await Broker.open({ config, berthHome: home, env: { PATH: process.env['PATH'] }, backends: { fake: backend } });
  const tokens = TokenStore.open(home);
  const lines: LogRecord[] = [];
  const server = await BerthServer.start({ broker, tokens, port: 0, log: (_ns, _m, r) => void lines.push(r!) });
  try {
    await backend.close();
    const { token } = tokens.create('acme');
    for (let i = 0; i < 5; i++) {
      const res = await fetch(`${server.url}/v1/exec`, {
        method: 'POST', headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' }, body: JSON.stringify({ session: `s${i}`, command: 'true' }),
      });
      expect(res.status).toBe(503);
      await res.arrayBuffer();
    }
    expect(lines).toHaveLength(5);
    for (const l of lines) {
      expect(l).toMatchObject({ level: 'error', component: 'berth:server', msg: 'POST /v1/exec 503' });
      expect(l.fields).toMatchObject({ method: 'POST', path: '/v1/exec', status: 503, tenant: 'acme', error: 'backend_unavailable: the fake backend was closed' });
      expect(l.fields?.['stack']).toBeUndefined();
    }
  } finally {
    await server.close({ graceMs: 1_000 });
    tokens.close();
    await broker.close();
    await engine.removeAll();
  }
});
