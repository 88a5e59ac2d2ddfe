import { BUILTIN_BACKENDS } from '../../src/backends/registry.js';
import { CONFORMANCE_TESTS as T, runBackendConformance } from '../conformance/backend-conformance.js';
import { SNAPSHOT_TESTS } from '../conformance/snapshot-conformance.js';
import { sshConfigSection, SshInstalls } from '../helpers/ssh-e2e.js';
import { describeSsh } from '../helpers/sshd.js';

describeSsh('ssh', () => {
  runBackendConformance({
    name: 'ssh',
    newBackend: async () => {
      const installs = new SshInstalls();
      return {
        name: 'ssh',
        catalog: BUILTIN_BACKENDS,
        config: { backend: 'ssh', ssh: sshConfigSection(), exec: { timeoutSeconds: 20 } },
        newHome: () => installs.newHome(),
        removeOutOfBand: (ref) => installs.removeOutOfBand(ref),
        cleanup: async () => {
          await installs.cleanup();
        },
      };
    },
    skip: [
      {
        reason: 'a sandbox is the account named by its identity digest (its home is the default cwd, known before connecting): ' +
          'a second ephemeral sandbox of one identity replaces a leftover one instead of running beside it',
        tests: [T.ephemeralRef],
      },
      {
        reason: 'ssh has no snapshot capability yet (an archive of the account\'s home is planned); the broker refuses snapshots there',
        tests: Object.values(SNAPSHOT_TESTS),
      },
    ],
  });
});
