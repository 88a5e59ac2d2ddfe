import { BackendUnavailableError } from '../../errors.js';
import { defineBackend } from '../module.js';

/**
 * A sandbox per account on a remote host over SSH. Not built yet: the name, traits and words are
 * here so configs naming it validate and explain; creating it fails closed (never a fallback).
 */
export const sshModule = defineBackend({
  name: 'ssh',
  traits: {
    mountsHostDirs: false,
    isolation: 'remote',
    jobsDieWithSandbox: true,
    listsByLabel: false,
    // Sessions keep their own sandboxes, and sharedKey does not apply (design §3).
    containerKeying: false,
    hostPaths: false,
    ownsProcessTable: false,
  },
  isolationNote: 'runs on a remote host over SSH as the configured account, without isolation from that account',
  words: {
    where: (b) => `Commands run on a remote host over SSH, in ${b.cwd}; they are not isolated from other users of that account.`,
    persistence: (b) => b.persistent
      ? `Files persist across sessions in ${b.cwd}.`
      : 'The session\'s directory is ephemeral: its files are removed when this session closes.',
  },
  defaultCwd: () => '/workspace',
  async create() {
    throw new BackendUnavailableError('backend "ssh" is not available yet in this version of berth; set backend: docker (or local for development) in the config');
  },
});
