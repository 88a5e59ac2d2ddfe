import { mkdtempSync, realpathSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BUILTIN_BACKENDS } from '../../src/backends/registry.js';
import { CONFORMANCE_TESTS as T, runBackendConformance } from '../conformance/backend-conformance.js';
import { SNAPSHOT_TESTS } from '../conformance/snapshot-conformance.js';

runBackendConformance({
  name: 'local',
  newBackend: async () => {
    const homes: string[] = [];
    return {
      name: 'local',
      catalog: BUILTIN_BACKENDS,
      config: {},
      newHome: () => {
        const home = realpathSync(mkdtempSync(join(tmpdir(), 'berth-conf-local-')));
        homes.push(home);
        return home;
      },
      removeOutOfBand: async (ref) => rmSync(ref, { recursive: true, force: true }),
      cleanup: async () => {
        for (const h of homes.splice(0)) rmSync(h, { recursive: true, force: true });
      },
    };
  },
  skip: [
    {
      reason: 'local sandboxes are host dirs named by their identity: there is no engine to keep a second ephemeral one apart',
      tests: [T.ephemeralRef],
    },
    {
      reason: 'local keeps no labels: the broker knows its sandboxes only from its own records',
      tests: [T.labels, T.reapLost],
    },
    {
      reason: 'local has no engine to ask whether its dir is still there; a shell in a removed dir runs on',
      tests: [T.outOfBand],
    },
    {
      reason: 'local has no snapshots: its sandbox is a host dir the user reaches anyway, with no isolation a snapshot could keep',
      tests: Object.values(SNAPSHOT_TESTS),
    },
  ],
});
