import { describe, expect, it } from 'vitest';
import { isolationNoteOf } from '../../src/backends/module.js';
import { BUILTIN_BACKENDS } from '../../src/backends/registry.js';
import { parseConfig } from '../../src/setup/parse-config.js';
import { settingsFor } from '../../src/config/types.js';
import { configErrorOf } from '../helpers/config-problem.js';

/* `backend: kubernetes` in the config: its section through the module, and the start-up rules. */

const errorOf = (raw: unknown): string => configErrorOf(raw);

describe('the kubernetes module in the config', () => {
  it('explain\'s note names the pod\'s requests and limits, defaults or the profile\'s', () => {
    const module = BUILTIN_BACKENDS.module('kubernetes');
    const config = parseConfig({ backend: 'kubernetes', kubernetes: { kubeconfig: '/k' }, profiles: { big: { kubernetes: { cpus: 4, memoryMb: 8192, memoryRequestMb: 1024 } } } });
    expect(isolationNoteOf(module, config.base)).toContain('it requests cpu 250m, memory 256Mi, ephemeral-storage 512Mi and is limited to cpu 2, memory 2048Mi, ephemeral-storage 4096Mi');
    expect(isolationNoteOf(module, settingsFor(config, 'big'))).toContain('it requests cpu 250m, memory 1024Mi, ephemeral-storage 512Mi and is limited to cpu 4, memory 8192Mi, ephemeral-storage 4096Mi');
  });

  it('is a registered backend whose section merges per profile, defaults applied', () => {
    const config = parseConfig({
      backend: 'kubernetes',
      kubernetes: { kubeconfig: '/etc/berth/kubeconfig', namespace: 'agents', image: 'registry.example/berth:1', storageMb: 2048, nodeSelector: { pool: 'a' } },
      profiles: { bot: { persistent: false, kubernetes: { mode: 'agent-sandbox', warmPool: 'py', namespace: 'bots' } } },
    });
    expect(config.base.kubernetes).toMatchObject({ kubeconfig: '/etc/berth/kubeconfig', namespace: 'agents', mode: 'pods', storageMb: 2048, runAsUser: 1000, nodeSelector: { pool: 'a' } });
    expect(settingsFor(config, 'bot').kubernetes).toMatchObject({ kubeconfig: '/etc/berth/kubeconfig', namespace: 'bots', mode: 'agent-sandbox', warmPool: 'py', image: 'registry.example/berth:1' });
    expect(BUILTIN_BACKENDS.module('kubernetes').images?.of(config.base.kubernetes)).toBe('registry.example/berth:1');
  });

  it('a warm pool with mode pods is a start-up error naming the fix', () => {
    expect(errorOf({ backend: 'kubernetes', kubernetes: { warmPool: 'py' } })).toContain('set kubernetes.mode: agent-sandbox or remove warmPool');
    expect(errorOf({ backend: 'kubernetes', persistent: true, profiles: { bot: { kubernetes: { mode: 'agent-sandbox', warmPool: 'py' } } } }))
      .toContain('config key "profiles.bot.kubernetes.warmPool": a warm pool hands out interchangeable sandboxes');
  });

  it('workspace.mount is a start-up error on kubernetes: the rule reads the trait (no host dirs on a cluster)', () => {
    expect(errorOf({ backend: 'kubernetes', workspace: { mount: true } })).toContain('kubernetes never mount');
    expect(errorOf({ backend: 'docker', profiles: { k: { backend: 'kubernetes', workspace: { mount: true } } } }))
      .toContain('config key "profiles.k.workspace.mount": profile "k" uses backend "kubernetes"');
  });

  it('every place that uses kubernetes reaches one cluster; namespaces may differ', () => {
    expect(errorOf({
      backend: 'kubernetes', kubernetes: { kubeconfig: '/a' },
      profiles: { other: { kubernetes: { kubeconfig: '/b' } } },
    })).toContain('config key "profiles.other.kubernetes": every place that uses backend kubernetes must reach the same cluster');
    expect(() => parseConfig({ backend: 'kubernetes', kubernetes: { kubeconfig: '/a' }, profiles: { other: { kubernetes: { namespace: 'b' } } } })).not.toThrow();
  });

  it('a kubernetes section where no profile uses the backend has no effect, and says so', () => {
    expect(errorOf({ backend: 'docker', kubernetes: { namespace: 'x' } })).toContain('no profile uses backend kubernetes');
  });
});
