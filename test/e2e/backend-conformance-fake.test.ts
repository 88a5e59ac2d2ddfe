import { mkdtempSync, realpathSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BUILTIN_BACKENDS } from '../../src/backends/registry.js';
import { runBackendConformance } from '../conformance/backend-conformance.js';
import { SNAPSHOT_TESTS } from '../conformance/snapshot-conformance.js';
import { FakeEngine } from '../fake-backend/fake-engine.js';
import { fakeModule } from '../fake-backend/module.js';

/** The fake backend (the broker's own tests run on it) passes the whole suite but snapshots. */
runBackendConformance({
  name: 'fake',
  newBackend: async () => {
    const engine = new FakeEngine();
    const homes: string[] = [];
    return {
      name: 'fake',
      catalog: BUILTIN_BACKENDS.with(fakeModule(engine)),
      config: {},
      newHome: () => {
        const home = realpathSync(mkdtempSync(join(tmpdir(), 'berth-conf-fake-')));
        homes.push(home);
        return home;
      },
      removeOutOfBand: (ref) => engine.removeOutOfBand(ref),
      cleanup: async () => {
        await engine.removeAll();
        for (const h of homes.splice(0)) rmSync(h, { recursive: true, force: true });
      },
    };
  },
  skip: [{ reason: "the fake backend's snapshots (test/fake-backend/fake-snapshots.ts) serve the broker's tests; the capability is certified on docker and bwrap", tests: Object.values(SNAPSHOT_TESTS) }],
});
