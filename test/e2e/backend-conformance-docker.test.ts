import { BUILTIN_BACKENDS } from '../../src/backends/registry.js';
import { runBackendConformance } from '../conformance/backend-conformance.js';
import { StateStore } from '../../src/broker/state/state-store.js';
import { describeDocker, docker, dockerSuiteHooks, IMAGE, imagesOf, installs } from '../helpers/docker-e2e.js';

const reg = installs('berth-conf-docker-');

/** Docker passes the whole suite: nothing is skipped. */

describeDocker('docker', () => {
  dockerSuiteHooks(reg);

  runBackendConformance({
    name: 'docker',
    newBackend: async () => ({
      name: 'docker',
      catalog: BUILTIN_BACKENDS,
      // Ephemeral sessions keep /workspace and the home on tmpfs: the hardest case for archives.
      config: { docker: { image: IMAGE }, exec: { timeoutSeconds: 20 } },
      newHome: () => reg.track().home,
      removeOutOfBand: async (ref) => {
        await docker.getContainer(ref).remove({ force: true });
      },
      cleanup: async () => {
        await reg.cleanupAll();
      },
      // A snapshot's image removed behind berth's back (`docker rmi -f`): verify names the image.
      damageSnapshot: async (ref) => {
        const image = ref.slice(ref.indexOf('@') + 1);
        await docker.getImage(image).remove({ force: true });
        return `image ${image.slice(7, 19)} is gone`;
      },
      leftoverSnapshots: async (home) => {
        const store = StateStore.open(home);
        try {
          return await imagesOf(store.installationId);
        } finally {
          store.close();
        }
      },
    }),
  });
});
