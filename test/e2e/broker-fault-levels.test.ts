import { join } from 'node:path';
import { expect, it } from 'vitest';
import { BUILTIN_BACKENDS } from '../../src/backends/registry.js';
import { Broker } from '../../src/broker/broker.js';
import { logSink } from '../../src/logging/log-sink.js';
import { parseConfig } from '../../src/setup/parse-config.js';
import { FakeBackend } from '../fake-backend/fake-backend.js';
import { FakeEngine } from '../fake-backend/fake-engine.js';
import { fakeModule } from '../fake-backend/module.js';
import { tempDir } from '../helpers/temp-dir.js';

/*
 * A failure berth carries on from (a reaper that cannot list an engine's sandboxes) is a warning:
 * it reaches the operator at the default level (warn), as a levelled record, not a debug line
 * only BERTH_DEBUG would show.
 */

it('a reaper that cannot list an engine\'s sandboxes logs a warning the default level shows', async () => {
  const home = tempDir('berth-fault-level-');
  const engine = new FakeEngine();
  const backend = new FakeBackend('fake', engine, 'unused', join(home, 'sandboxes', 'fake'));
  backend.listManaged = () => Promise.reject(new Error('engine listing broke'));
  const written: string[] = [];
  const sink = logSink({ threshold: 'warn', json: true, write: (line) => void written.push(line) });
  const config = parseConfig({ backend: 'fake', persistent: false }, undefined, { backends: BUILTIN_BACKENDS.with(fakeModule(engine)) });
  const broker = await Broker.open({ config, berthHome: home, env: { PATH: process.env['PATH'] }, backends: { fake: backend }, log: sink, reap: false });
  try {
    await broker.reapers.reapOrphans();
    const lines = written.map((l) => JSON.parse(l) as { level: string; component: string; msg: string });
    expect(lines).toContainEqual(expect.objectContaining({ level: 'warn', component: 'berth:reaper', msg: 'list fake sandboxes: Error: engine listing broke' }));
  } finally {
    await broker.close();
    await engine.removeAll();
  }
});
