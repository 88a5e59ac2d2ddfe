import { defineBackend } from '../module.js';
import { LIMIT_DEFAULTS } from './limits.js';
import { WORKSPACE } from './paths.js';
import { dockerSettings } from './settings.js';

/** Sandboxes as containers on a Docker Engine (the default backend). */
export const dockerModule = defineBackend({
  name: 'docker',
  traits: {
    mountsHostDirs: true,
    isolation: 'container',
    jobsDieWithSandbox: true,
    runsWithoutBerth: true,
    listsByLabel: true,
    containerKeying: true,
    hostPaths: false,
    ownsProcessTable: true,
    // Allowlist: the sandbox's own network namespace with loopback only, berth's proxy listening in it.
    egressModes: ['open', 'allowlist', 'none'],
  },
  settings: dockerSettings,
  processGroups: 'engine',
  images: {
    of: (s) => s.image,
    with: (s, image) => ({ ...s, image }),
    async provide(request) {
      const [{ provideImage }, { defaultDocker }] = await Promise.all([import('./image-pull.js'), import('./engine.js')]);
      return provideImage({ docker: defaultDocker(), ...request });
    },
  },
  reservation: (s) => ({ memoryMb: s.memoryMb ?? LIMIT_DEFAULTS.memoryMb, diskMb: s.diskMb ?? LIMIT_DEFAULTS.diskMb }),
  words: {
    where: (b) => b.persistent
      ? `Commands run in a Docker container isolated from the host (sandbox "${b.sandboxKey}"), starting in ${b.cwd}.`
      : `Commands run in a Docker container created for this session, isolated from the host, starting in ${b.cwd}.`,
    persistence: (b) => {
      if (b.persistent) return `The sandbox is persistent: files persist across sessions in ${WORKSPACE} (and elsewhere in the container) until the sandbox is removed.`;
      return b.mounted
        ? `The container is ephemeral: files outside ${WORKSPACE} vanish when this session closes.`
        : 'The sandbox is ephemeral: its files vanish when this session closes.';
    },
  },
  defaultCwd: () => WORKSPACE,
  async create(ctx) {
    const { DockerBackend } = await import('./docker-backend.js');
    return new DockerBackend({ installation: ctx.installation, berthHome: ctx.berthHome, log: ctx.log, lease: ctx.lease });
  },
});
