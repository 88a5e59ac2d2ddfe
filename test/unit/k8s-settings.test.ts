import * as z from 'zod';
import { describe, expect, it } from 'vitest';
import { KUBERNETES_DEFAULTS, kubernetesSettings, kubernetesSettingsProblems } from '../../src/backends/kubernetes/settings.js';

function issues(raw: unknown): string[] {
  const r = z.strictObject(kubernetesSettings.shape, { error: 'a mapping of keys' }).safeParse(raw);
  return r.success ? [] : r.error.issues.map((i) => `${i.path.join('.')}: ${i.message}${'keys' in i ? ` ${String(i.keys)}` : ''}`);
}

describe('kubernetes settings section', () => {
  it('accepts every documented key', () => {
    expect(issues({
      kubeconfig: '/etc/berth/kubeconfig', context: 'prod', namespace: 'berth-sandboxes', mode: 'agent-sandbox', warmPool: 'python-pool',
      image: 'ghcr.io/x/y:1', imagePullPolicy: 'Always', memoryMb: 1024, cpus: 0.5, ephemeralStorageMb: 2048, memoryRequestMb: 512, cpuRequest: 0.1, ephemeralStorageRequestMb: 256, tmpSizeMb: 256, storageMb: 4096,
      storageClassName: 'standard', runtimeClassName: 'gvisor', nodeSelector: { pool: 'agents' }, serviceAccountName: 'sandbox',
      runAsUser: 1000, runAsGroup: 1000, fsGroup: 1000, network: 'none', networkPolicy: true, podStartTimeoutSeconds: 60,
    })).toEqual([]);
  });

  it('refuses unknown keys and bad values, naming them', () => {
    expect(issues({ namespce: 'x' }).join('\n')).toContain('namespce');
    expect(issues({ namespace: 'Berth_NS' })).toEqual(['namespace: a namespace name (lowercase letters, digits and "-", at most 63)']);
    expect(issues({ runAsUser: 0 })).toEqual(['runAsUser: a uid/gid of at least 1 (0 is root)']);
    expect(issues({ mode: 'deployments' })).toEqual(['mode: one of "pods", "agent-sandbox"']);
    expect(issues({ memoryMb: -1 })).toEqual(['memoryMb: a positive integer']);
  });

  it('defaults: plain pods, non-root 1000, a NetworkPolicy, egress allowed', () => {
    const s = kubernetesSettings.defaults();
    expect(s).toMatchObject({ mode: 'pods', runAsUser: 1000, networkPolicy: true, network: 'egress', inCluster: false });
  });

  it('cross-field rules: settings that would do nothing are errors that say how to fix them', () => {
    const at = 'kubernetes';
    const s = (over: object) => ({ ...KUBERNETES_DEFAULTS, ...over });
    expect(kubernetesSettingsProblems(s({ inCluster: true, kubeconfig: '/k' }), at, true)).toEqual([
      'config key "kubernetes.inCluster": true uses the pod\'s service account, so kubeconfig would have no effect; remove one of them',
    ]);
    expect(kubernetesSettingsProblems(s({ warmPool: 'p' }), at, false).join('\n')).toContain('set kubernetes.mode: agent-sandbox');
    expect(kubernetesSettingsProblems(s({ mode: 'agent-sandbox', warmPool: 'p' }), at, true).join('\n')).toContain('set persistent: false');
    expect(kubernetesSettingsProblems(s({ mode: 'agent-sandbox', warmPool: 'p' }), at, false)).toEqual([]);
    expect(kubernetesSettingsProblems(s({ network: 'none', networkPolicy: false }), at, true).join('\n')).toContain('would have no effect');
    expect(kubernetesSettingsProblems(s({ mode: 'agent-sandbox', warmPool: 'p', network: 'none' }), at, false)).toEqual([
      'config key "kubernetes.network": "none" cannot be guaranteed for warm-pool pods, because the SandboxTemplate\'s own NetworkPolicy (agent-sandbox\'s default admits public egress) adds to berth\'s; remove warmPool, or use network: egress and deny egress in the template\'s networkPolicy',
    ]);
    expect(kubernetesSettingsProblems(s({ cpuRequest: 4 }), at, true)).toEqual([
      'config key "kubernetes.cpuRequest": 4 is more than the limit cpus (2), which Kubernetes refuses; lower cpuRequest or raise cpus',
    ]);
    expect(kubernetesSettingsProblems(s({ memoryMb: 128 }), at, true).join('\n')).toContain('"kubernetes.memoryRequestMb": 256 is more than the limit memoryMb (128)');
    expect(kubernetesSettingsProblems(KUBERNETES_DEFAULTS, at, true)).toEqual([]);
  });
});
