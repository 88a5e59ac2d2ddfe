import { defineBackend } from '../module.js';
import { SANDBOX_WORKSPACE } from './layout.js';
import { bwrapSettings } from './settings.js';

/** Sandboxes as bubblewrap namespaces on this host, each as an unprivileged uid of its own, with a syscall filter. */
export const bwrapModule = defineBackend({
  name: 'bwrap',
  traits: {
    // An attached workspace is bound at /workspace, so the docker mount rules and the credential-surface refusals apply.
    mountsHostDirs: true,
    isolation: 'namespace',
    // Removing a sandbox kills the pid 1 of its pid namespace: the kernel ends every process in it.
    jobsDieWithSandbox: true,
    // Each sandbox dir keeps its installation, digest and lifecycle (records.ts): the reapers list them.
    listsByLabel: true,
    /*
     * Container-like keying (design §3): a namespace sandbox holds its own processes, /tmp and
     * home apart from the host and from every other sandbox, as a container does, so a task's
     * subagents share the root task's sandbox and a persistent profile shares one sandbox across
     * sessions; nothing of it is the host's, so nothing ties it to one session as on `local`.
     */
    containerKeying: true,
    hostPaths: false,
    // Its own pid namespace: every process the shell can signal is the sandbox's.
    ownsProcessTable: true,
    // Allowlist: the sandbox's own network namespace with loopback only, berth's proxy listening in it.
    egressModes: ['open', 'allowlist', 'none'],
  },
  settings: bwrapSettings,
  processGroups: 'host',
  isolationNoteFor: (s) => {
    const open = [
      ...(s.seccomp ? [] : ['WITHOUT the syscall filter (bwrap.seccomp: false): mount, ptrace, keyctl, bpf and io_uring are open to commands']),
      ...(s.network === 'host' ? ['on the host\'s network (bwrap.network: host)'] : []),
    ];
    return open.length === 0 ? undefined : `bubblewrap namespaces ${open.join('; and ')}`;
  },
  words: {
    where: (b) => b.persistent
      ? `Commands run in a bubblewrap sandbox isolated from the host by Linux namespaces (sandbox "${b.sandboxKey}"), starting in ${b.cwd}.`
      : `Commands run in a bubblewrap sandbox created for this session, isolated from the host by Linux namespaces, starting in ${b.cwd}.`,
    persistence: (b) => {
      if (b.persistent) return `The sandbox is persistent: files in ${SANDBOX_WORKSPACE} and the home dir persist across sessions until the sandbox is removed; /tmp is emptied when it restarts.`;
      return b.mounted
        ? `The sandbox is ephemeral: files outside ${SANDBOX_WORKSPACE} vanish when this session closes.`
        : 'The sandbox is ephemeral: its files vanish when this session closes.';
    },
  },
  defaultCwd: () => SANDBOX_WORKSPACE,
  async create(ctx) {
    const { BwrapBackend } = await import('./bwrap-backend.js');
    return new BwrapBackend({ berthHome: ctx.berthHome, installation: ctx.installation, log: ctx.log });
  },
});
