import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { BUILTIN_BACKENDS } from '../../src/backends/registry.js';
import { CONFORMANCE_TESTS as T, runBackendConformance } from '../conformance/backend-conformance.js';
import { removeOneFile } from '../conformance/snapshot-conformance.js';
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
        // A snapshot's copy of the account's home deleted behind berth's back: verify names the dir.
        damageSnapshot: async (ref) => {
          rmSync(join(ref, 'home'), { recursive: true, force: true });
          return join(ref, 'home');
        },
        damageSnapshotPartly: async (ref) => removeOneFile(join(ref, 'home')),
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
    ],
  });
});
