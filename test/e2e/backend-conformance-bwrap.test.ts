import { chmodSync, mkdtempSync, realpathSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { killHolders } from '../../src/backends/bwrap/records.js';
import { BUILTIN_BACKENDS } from '../../src/backends/registry.js';
import { runBackendConformance } from '../conformance/backend-conformance.js';
import { removeOneFile } from '../conformance/snapshot-conformance.js';
import { describeBwrap, testRange } from '../helpers/bwrap.js';

/** bwrap passes the whole suite: nothing is skipped. */

describeBwrap('bwrap', () => {
  const range = testRange();

  runBackendConformance({
    name: 'bwrap',
    newBackend: async () => {
      // One root for every installation of a test (as on a host): listing must tell them apart.
      const dir = realpathSync(mkdtempSync(join(tmpdir(), 'berth-conf-bwrap-')));
      chmodSync(dir, 0o711);
      const homes: string[] = [];
      return {
        name: 'bwrap',
        catalog: BUILTIN_BACKENDS,
        config: { bwrap: { root: join(dir, 'root'), uids: range, tmpSizeMb: 64 }, exec: { timeoutSeconds: 20 } },
        newHome: () => {
          const home = realpathSync(mkdtempSync(join(tmpdir(), 'berth-conf-bwrap-home-')));
          homes.push(home);
          return home;
        },
        // As `docker rm -f`: every process of the sandbox ends, and its dirs go.
        removeOutOfBand: async (ref) => {
          await killHolders(ref);
          rmSync(ref, { recursive: true, force: true });
        },
        // A snapshot's copied home deleted behind berth's back: verify names the dir.
        damageSnapshot: async (ref) => {
          rmSync(join(ref, 'home'), { recursive: true, force: true });
          return join(ref, 'home');
        },
        damageSnapshotPartly: async (ref) => removeOneFile(join(ref, 'workspace')),
        cleanup: async () => {
          for (const h of homes.splice(0)) rmSync(h, { recursive: true, force: true });
          rmSync(dir, { recursive: true, force: true });
        },
      };
    },
  });
});
