import { defineBackend } from '../module.js';
import { localSandboxDir } from './paths.js';

/** The host itself, in a per-sandbox dir: no isolation at all (development, machines without an engine). */
export const localModule = defineBackend({
  name: 'local',
  traits: {
    mountsHostDirs: false,
    isolation: 'none',
    jobsDieWithSandbox: false,
    listsByLabel: false,
    containerKeying: false,
    hostPaths: true,
    ownsProcessTable: false,
  },
  isolationNote: 'runs on this host as berth\'s user, without isolation: commands can read and change anything that user can',
  processGroups: 'host',
  words: {
    where: (b) => `NOT isolated: commands run directly on the host machine, as the user berth runs as, starting in ${b.cwd}. ` +
      'They can read and change anything that user can; there is no container.',
    persistence: (b) => b.persistent
      ? `Files persist across sessions in ${b.cwd}.`
      : 'The session\'s directory is ephemeral: its files are removed when this session closes.',
  },
  defaultCwd: ({ berthHome, dirName }) => localSandboxDir(berthHome, dirName),
  async create(ctx) {
    const { LocalBackend } = await import('./local-backend.js');
    return new LocalBackend({ berthHome: ctx.berthHome, installation: ctx.installation, log: ctx.log });
  },
});
