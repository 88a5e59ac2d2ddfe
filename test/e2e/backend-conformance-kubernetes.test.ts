import { afterAll, beforeAll } from 'vitest';
import { BUILTIN_BACKENDS } from '../../src/backends/registry.js';
import { runBackendConformance } from '../conformance/backend-conformance.js';
import { SNAPSHOT_TESTS } from '../conformance/snapshot-conformance.js';
import { describeDocker, ensureImage } from '../helpers/docker-e2e.js';
import { BerthOnStandin } from '../k8s-standin/berth-on-standin.js';

/*
 * The kubernetes backend (mode pods) through the stand-in API server: the real client, the real
 * exec WebSocket protocol, each pod a real container on this host's engine (so the suite's
 * host-side process checks see into the pods). Only snapshots are skipped.
 */

describeDocker('kubernetes (stand-in API server)', () => {
  let cluster: BerthOnStandin | undefined;
  beforeAll(async () => {
    await ensureImage();
    cluster = await BerthOnStandin.start();
  }, 120_000);
  afterAll(async () => {
    await cluster?.stop();
  }, 120_000);

  const c = (): BerthOnStandin => {
    if (cluster === undefined) throw new Error('the stand-in did not start');
    return cluster;
  };

  runBackendConformance({
    name: 'kubernetes',
    newBackend: async () => ({
      name: 'kubernetes',
      catalog: BUILTIN_BACKENDS,
      config: { kubernetes: c().section(), exec: { timeoutSeconds: 20 } },
      newHome: () => c().newHome(),
      removeOutOfBand: (ref) => c().removeOutOfBand(ref),
      cleanup: () => c().reset(),
    }),
    skip: [{
      reason: 'kubernetes has no snapshot capability: a pod\'s filesystem cannot be committed through the API, and volume snapshots ' +
        'need a CSI driver berth cannot assume; the broker refuses snapshots there with that reason',
      tests: Object.values(SNAPSHOT_TESTS),
    }],
  });
});
