import { BUILTIN_BACKENDS } from '../../src/backends/registry.js';
import { runBackendConformance } from '../conformance/backend-conformance.js';
import { describeDocker, docker, dockerSuiteHooks, IMAGE, installs } from '../helpers/docker-e2e.js';

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
    }),
  });
});
