import { defineBackend } from '../module.js';
import { accountName } from './account-name.js';
import { describeHost, sshSettings } from './settings.js';

/**
 * Sandboxes on a remote host over SSH: each is its own unprivileged account there (design §3:
 * ssh ignores sharedKey, and sessions keep their own sandboxes).
 */
export const sshModule = defineBackend({
  name: 'ssh',
  traits: {
    mountsHostDirs: false,
    isolation: 'remote',
    // Removing the account ends every process it runs.
    jobsDieWithSandbox: true,
    // Each account has a root-owned record naming its installation, digest and lifecycle.
    listsByLabel: true,
    containerKeying: false,
    hostPaths: false,
    ownsProcessTable: false,
  },
  settings: sshSettings,
  // A cgroup per command on the host, made by berth's root agent there (cgroup-scripts.ts).
  processGroups: 'remote',
  isolationNote:
    'runs on a remote host over SSH as its own unprivileged account, in PID, IPC and mount namespaces of its own: other sandboxes\' files, ' +
    'environment, processes, temp dirs and IPC objects are out of its reach, but it shares that host\'s kernel and network',
  host: (s) => describeHost(s),
  words: {
    where: (b) => `Commands run on a remote host over SSH as this sandbox's own unprivileged account (no root), starting in ${b.cwd}; ` +
      'other sessions on that host cannot read its files, environment or processes.',
    persistence: (b) => b.persistent
      ? `The sandbox is persistent: files persist across sessions in ${b.cwd} (and the rest of the account's home) until the sandbox is removed.`
      : 'The sandbox is ephemeral: its account and files are removed when this session closes.',
  },
  defaultCwd: ({ digest, settings }) => `${settings.homeRoot}/${accountName(digest)}/workspace`,
  async create(ctx) {
    const { SshBackend } = await import('./ssh-backend.js');
    return new SshBackend({ installation: ctx.installation, berthHome: ctx.berthHome, configured: ctx.places ?? [], log: ctx.log });
  },
});
