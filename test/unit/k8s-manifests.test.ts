import { createHash } from 'node:crypto';
import type { V1PodSpec } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { sandboxClaimResource, sandboxResource } from '../../src/backends/kubernetes/agent-sandbox-manifests.js';
import { identitySelector, LABEL, labelValue } from '../../src/backends/kubernetes/labels.js';
import { LABEL as ENGINE_LABEL } from '../../src/backends/labels.js';
import { BLOCKED_V4, BLOCKED_V6 } from '../../src/backends/kubernetes/network-ranges.js';
import {
  HOME,
  sandboxDataClaim,
  sandboxPod,
  tenantNetworkPolicy,
  WORKSPACE,
  type SandboxManifestInput,
} from '../../src/backends/kubernetes/manifests.js';
import { dataClaimName, ephemeralPodName, persistentPodName, tenantPolicyName } from '../../src/backends/kubernetes/names.js';
import { KUBERNETES_DEFAULTS, kubernetesSettings, type KubernetesSettings } from '../../src/backends/kubernetes/settings.js';
import { UnsupportedError } from '../../src/errors.js';
import { restrictedViolations } from '../k8s-standin/pod-security.js';
import { labelValueErrors } from '../schemas/object-meta.js';
import { loadValidator } from '../schemas/validate.js';

const validator = loadValidator();

function digestOf(...parts: string[]): string {
  return createHash('sha256').update(JSON.stringify(parts)).digest('hex');
}

function input(over: Partial<SandboxManifestInput> & { k?: Partial<KubernetesSettings> } = {}): SandboxManifestInput {
  const identity = over.identity ?? { installation: '6f1c2a4e-0d1b-4a57-9d7e-2b1f0c3d4e5f', tenant: 'acme', profile: 'default', key: 'session:chat-42' };
  const digest = over.digest ?? digestOf(identity.installation, identity.tenant, identity.profile ?? '', identity.key);
  const ephemeral = over.ephemeral ?? false;
  return {
    identity,
    digest,
    ephemeral,
    rule: over.rule ?? 'auto:5',
    name: over.name ?? (ephemeral ? ephemeralPodName(digest, '0a1b2c3d') : persistentPodName(digest)),
    mount: over.mount ?? null,
    kubernetes: { ...KUBERNETES_DEFAULTS, ...over.k },
  };
}

const EVERYTHING: Partial<KubernetesSettings> = {
  memoryMb: 2048,
  cpus: 1.5,
  ephemeralStorageMb: 4096,
  runtimeClassName: 'gvisor',
  nodeSelector: { 'sandbox.example.com/pool': 'agents' },
  serviceAccountName: 'berth-sandbox',
  storageClassName: 'fast-ssd',
  imagePullPolicy: 'IfNotPresent',
  image: 'registry.example.com/berth/sandbox:1.2',
};

const CASES: [string, SandboxManifestInput][] = [
  ['persistent, defaults', input()],
  ['ephemeral, defaults', input({ ephemeral: true })],
  ['persistent, every setting', input({ k: EVERYTHING })],
  ['ephemeral, every setting', input({ ephemeral: true, k: EVERYTHING })],
  ['shared key, no profile, odd tenant', input({ identity: { installation: 'inst-1', tenant: '-weird.tenant_', profile: undefined, key: 'shared:team/α' } })],
];

function specOf(i: SandboxManifestInput): V1PodSpec {
  return sandboxPod(i).spec as V1PodSpec;
}

describe('kubernetes manifests validate against the vendored schemas', () => {
  for (const [name, i] of CASES) {
    it(`Pod: ${name}`, () => validator.assertValid(sandboxPod(i)));
    it(`Sandbox: ${name}`, () => validator.assertValid(sandboxResource(i)));
    if (!i.ephemeral) it(`PersistentVolumeClaim: ${name}`, () => validator.assertValid(sandboxDataClaim(i)));
  }
  it('SandboxClaim on a warm pool', () => validator.assertValid(sandboxClaimResource(input({ ephemeral: true, k: { mode: 'agent-sandbox', warmPool: 'python-pool' } }))));
  it('NetworkPolicy, egress and none', () => {
    validator.assertValid(tenantNetworkPolicy('inst-1', 'acme', KUBERNETES_DEFAULTS));
    validator.assertValid(tenantNetworkPolicy('inst-1', 'acme', { ...KUBERNETES_DEFAULTS, network: 'none' }));
  });
  it('the validator would catch a manifest mistake (a misspelt field)', () => {
    const pod = sandboxPod(input()) as unknown as { spec: Record<string, unknown> };
    pod.spec['automountServiceAccountTokn'] = false;
    expect(validator.errors(pod).join('\n')).toContain('unknown field "automountServiceAccountTokn"');
  });
});

describe('kubernetes pod security', () => {
  for (const [name, i] of CASES) {
    it(`meets Pod Security "restricted": ${name}`, () => {
      expect(restrictedViolations(specOf(i))).toEqual([]);
      expect(restrictedViolations(sandboxResource(i).spec.podTemplate.spec)).toEqual([]);
    });
  }

  it('the restricted check itself flags what it must', () => {
    const spec = specOf(input());
    const c = spec.containers[0]!;
    c.securityContext = { ...c.securityContext, allowPrivilegeEscalation: true, capabilities: { drop: [], add: ['SYS_ADMIN'] } };
    spec.hostPID = true;
    spec.volumes = [...(spec.volumes ?? []), { name: 'host', hostPath: { path: '/' } }];
    const v = restrictedViolations(spec).join('\n');
    for (const expected of ['allowPrivilegeEscalation', 'drop must include ALL', 'SYS_ADMIN', 'hostPID', 'hostPath']) expect(v).toContain(expected);
  });

  it('runs as the configured non-root uid, never root', () => {
    const spec = specOf(input({ k: { runAsUser: 4242, runAsGroup: 4343, fsGroup: 4444 } }));
    expect(spec.securityContext).toMatchObject({ runAsNonRoot: true, runAsUser: 4242, runAsGroup: 4343, fsGroup: 4444 });
    expect(spec.containers[0]!.securityContext).toMatchObject({ runAsNonRoot: true, runAsUser: 4242, runAsGroup: 4343 });
  });

  it('forbids privilege escalation and privileged mode, drops every capability and adds none', () => {
    const sc = specOf(input()).containers[0]!.securityContext!;
    expect(sc.allowPrivilegeEscalation).toBe(false);
    expect(sc.privileged).toBe(false);
    expect(sc.capabilities).toEqual({ drop: ['ALL'] });
  });

  it('uses the runtime default seccomp profile at pod and container level', () => {
    const spec = specOf(input());
    expect(spec.securityContext!.seccompProfile).toEqual({ type: 'RuntimeDefault' });
    expect(spec.containers[0]!.securityContext!.seccompProfile).toEqual({ type: 'RuntimeDefault' });
  });

  it('mounts no service-account token and injects no service environment', () => {
    const spec = specOf(input({ k: { serviceAccountName: 'berth-sandbox' } }));
    expect(spec.automountServiceAccountToken).toBe(false);
    expect(spec.enableServiceLinks).toBe(false);
  });

  it('uses no host namespace, host path or host port', () => {
    for (const [, i] of CASES) {
      const spec = specOf(i);
      expect(spec.hostNetwork ?? false).toBe(false);
      expect(spec.hostPID ?? false).toBe(false);
      expect(spec.hostIPC ?? false).toBe(false);
      expect((spec.volumes ?? []).every((v) => v.hostPath === undefined)).toBe(true);
      expect(spec.containers.every((c) => (c.ports ?? []).length === 0)).toBe(true);
    }
  });

  it('has a read-only root file system with writable volumes exactly at workspace, home and /tmp', () => {
    for (const [, i] of CASES) {
      const c = specOf(i).containers[0]!;
      expect(c.securityContext!.readOnlyRootFilesystem).toBe(true);
      expect((c.volumeMounts ?? []).map((m) => m.mountPath).sort()).toEqual([HOME, '/tmp', WORKSPACE].sort());
    }
  });

  it('a container that only waits: the shell is exec\'d into it, nothing reads stdin', () => {
    const c = specOf(input()).containers[0]!;
    expect(c.command).toEqual(['sleep', 'infinity']);
    expect(c.args).toBeUndefined();
    expect(c.stdin).toBe(false);
    expect(c.tty).toBe(false);
    expect(specOf(input()).restartPolicy).toBe('Never');
  });
});

describe('kubernetes manifests follow the settings', () => {
  it('resources: requests and limits for cpu, memory and ephemeral storage by default, each from the profile when set', () => {
    expect(specOf(input()).containers[0]!.resources).toEqual({
      requests: { cpu: '250m', memory: '256Mi', 'ephemeral-storage': '512Mi' },
      limits: { cpu: '2', memory: '2048Mi', 'ephemeral-storage': '4096Mi' },
    });
    const c = specOf(input({ k: { ...EVERYTHING, cpuRequest: 1, memoryRequestMb: 1024, ephemeralStorageRequestMb: 100 } })).containers[0]!;
    expect(c.resources).toEqual({
      requests: { cpu: '1', memory: '1024Mi', 'ephemeral-storage': '100Mi' },
      limits: { cpu: '1500m', memory: '2048Mi', 'ephemeral-storage': '4096Mi' },
    });
  });

  it('runtimeClassName, nodeSelector, serviceAccountName and image when set, absent otherwise', () => {
    const set = specOf(input({ k: EVERYTHING }));
    expect(set.runtimeClassName).toBe('gvisor');
    expect(set.nodeSelector).toEqual({ 'sandbox.example.com/pool': 'agents' });
    expect(set.serviceAccountName).toBe('berth-sandbox');
    expect(set.containers[0]!.image).toBe('registry.example.com/berth/sandbox:1.2');
    expect(set.containers[0]!.imagePullPolicy).toBe('IfNotPresent');
    const unset = specOf(input());
    for (const key of ['runtimeClassName', 'nodeSelector', 'serviceAccountName'] as const) expect(unset[key]).toBeUndefined();
  });

  it('persistent sandboxes keep workspace and home on their claim; ephemeral ones on sized emptyDirs', () => {
    const p = input({ k: { storageMb: 5000, storageClassName: 'fast' } });
    const spec = specOf(p);
    expect(spec.volumes).toContainEqual({ name: 'data', persistentVolumeClaim: { claimName: dataClaimName(p.name) } });
    expect(spec.containers[0]!.volumeMounts).toContainEqual({ name: 'data', mountPath: WORKSPACE, subPath: 'workspace' });
    expect(sandboxDataClaim(p).spec).toEqual({ accessModes: ['ReadWriteOnce'], resources: { requests: { storage: '5000Mi' } }, storageClassName: 'fast' });
    const e = specOf(input({ ephemeral: true, k: { tmpSizeMb: 64 } }));
    expect(e.volumes).toContainEqual({ name: 'workspace', emptyDir: { sizeLimit: '64Mi' } });
    expect(e.volumes!.some((v) => v.persistentVolumeClaim !== undefined)).toBe(false);
    expect(() => sandboxDataClaim(input({ ephemeral: true }))).toThrow(/no data claim/);
  });

  it('refuses a host mount instead of dropping it', () => {
    expect(() => sandboxPod(input({ mount: '/home/ana/project' }))).toThrow(UnsupportedError);
    expect(() => sandboxPod(input({ mount: '/home/ana/project' }))).toThrow(/cannot mount host dir "\/home\/ana\/project"/);
    expect(() => sandboxClaimResource(input({ ephemeral: true, mount: '/x', k: { warmPool: 'p' } }))).toThrow(UnsupportedError);
  });

  it('agent-sandbox: the Sandbox carries the same pod spec; persistence through a claim template the controller mounts', () => {
    const i = input();
    const s = sandboxResource(i);
    expect(s.spec.podTemplate.spec.containers).toEqual(specOf(i).containers);
    // The controller adds the volume named after the template; declaring it too would clash.
    expect(s.spec.podTemplate.spec.volumes!.some((v) => v.name === 'data')).toBe(false);
    expect(s.spec.volumeClaimTemplates![0]!.metadata.name).toBe('data');
    expect(sandboxResource(input({ ephemeral: true })).spec.volumeClaimTemplates).toBeUndefined();
    expect(() => sandboxClaimResource(input({ ephemeral: false, k: { warmPool: 'p' } }))).toThrow(/only ephemeral/);
  });
});

describe('kubernetes names and labels', () => {
  it('persistent names are the same for the same digest; ephemeral ones differ per creation', () => {
    const d = digestOf('x');
    expect(persistentPodName(d)).toBe(persistentPodName(d));
    expect(persistentPodName(d)).toMatch(/^berth-[0-9a-f]{24}$/);
    expect(ephemeralPodName(d, '0a1b2c3d')).not.toBe(ephemeralPodName(d, '0a1b2c3e'));
    expect(() => ephemeralPodName(d, 'Not-Hex')).toThrow(RangeError);
    for (const n of [persistentPodName(d), ephemeralPodName(d, 'ffffffffffffffff'), dataClaimName(persistentPodName(d)), tenantPolicyName('i', 't', 'egress')]) {
      expect(n.length).toBeLessThanOrEqual(63);
      expect(n).toMatch(/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/);
    }
  });

  it('every label and annotation key is under berth\'s domain (berth.dev/), the names docker\'s labels use', () => {
    const i = input({ ephemeral: true, k: { mode: 'agent-sandbox', warmPool: 'python-pool' } });
    const claim = sandboxClaimResource(i);
    const keys = [
      ...Object.keys(sandboxPod(i).metadata!.labels!), ...Object.keys(sandboxPod(i).metadata!.annotations!),
      ...Object.keys(claim.metadata.labels!), ...Object.keys(claim.metadata.annotations!),
      ...Object.keys(claim.spec.additionalPodMetadata.labels), ...Object.keys(claim.spec.additionalPodMetadata.annotations),
      ...Object.keys(tenantNetworkPolicy('inst', 't', i.kubernetes).metadata!.labels!),
    ];
    for (const k of keys) expect(k).toMatch(/^berth\.dev\/[a-z-]+$/);
    expect(Object.values(LABEL).sort()).toEqual(Object.values(ENGINE_LABEL).map((k) => k.replace(/^berth\./, 'berth.dev/')).sort());
    // The claim gives the pool pod the network label too, so the tenant's NetworkPolicy selects it.
    expect(claim.spec.additionalPodMetadata.labels).toEqual(sandboxPod(i).metadata!.labels);
  });

  it('labels like docker\'s, each a valid label value whatever the key, tenant or profile', () => {
    const i = input({ identity: { installation: 'inst', tenant: 'Tenant.With.Dots-', profile: 'p'.repeat(64), key: 'user:telegram:12345/../x' } });
    const labels = sandboxPod(i).metadata!.labels!;
    expect(Object.keys(labels).sort()).toEqual([...Object.values(LABEL), 'berth.dev/network'].sort());
    for (const [k, v] of Object.entries(labels)) expect(labelValueErrors(v, k)).toEqual([]);
    expect(labels[LABEL.key]).toMatch(/^h\.[0-9a-f]{40}$/);
    expect(labels[LABEL.lifecycle]).toBe('persistent');
    expect(sandboxPod(input({ ephemeral: true })).metadata!.labels![LABEL.lifecycle]).toBe('ephemeral');
    const annotations = sandboxPod(i).metadata!.annotations!;
    expect(annotations[LABEL.key]).toBe('user:telegram:12345/../x');
    expect(annotations[LABEL.tenant]).toBe('Tenant.With.Dots-');
    expect(annotations['berth.dev/identity']).toBe(i.digest);
  });

  it('readable values stay verbatim in labels when they fit', () => {
    expect(labelValue('acme')).toBe('acme');
    expect(labelValue('session:s1')).toMatch(/^h\./);
    expect(labelValue('')).toBe('');
  });

  it('the identity selector picks this installation\'s objects of this identity', () => {
    const i = input();
    const labels = sandboxPod(i).metadata!.labels!;
    for (const term of identitySelector(i.identity.installation, i.digest).split(',')) {
      const [k, v] = term.split('=') as [string, string];
      expect(labels[k]).toBe(v);
    }
  });
});

describe('kubernetes tenant network policy', () => {
  it('selects exactly one tenant of one installation and admits no ingress', () => {
    const np = tenantNetworkPolicy('inst-1', 'acme', KUBERNETES_DEFAULTS);
    expect(np.spec!.podSelector!.matchLabels).toEqual({ [LABEL.managed]: 'true', [LABEL.installation]: 'inst-1', [LABEL.tenant]: 'acme', 'berth.dev/network': 'egress' });
    expect(np.spec!.policyTypes).toEqual(['Ingress', 'Egress']);
    expect(np.spec!.ingress).toEqual([]);
    const pod = sandboxPod(input({ identity: { installation: 'inst-1', tenant: 'acme', profile: 'default', key: 'default' } }));
    for (const [k, v] of Object.entries(np.spec!.podSelector!.matchLabels!)) expect(pod.metadata!.labels![k]).toBe(v);
  });

  it('different tenants get different policies', () => {
    const a = tenantNetworkPolicy('inst-1', 'acme', KUBERNETES_DEFAULTS);
    const b = tenantNetworkPolicy('inst-1', 'globex', KUBERNETES_DEFAULTS);
    expect(a.metadata!.name).not.toBe(b.metadata!.name);
    expect(a.spec!.podSelector).not.toEqual(b.spec!.podSelector);
  });

  it('each network reach has its own policy, and a pod is picked by exactly the one of its reach (policies add up)', () => {
    const none = { ...KUBERNETES_DEFAULTS, network: 'none' as const };
    const egressPolicy = tenantNetworkPolicy('inst-1', 'acme', KUBERNETES_DEFAULTS);
    const nonePolicy = tenantNetworkPolicy('inst-1', 'acme', none);
    expect(egressPolicy.metadata!.name).not.toBe(nonePolicy.metadata!.name);
    const identity = { installation: 'inst-1', tenant: 'acme', profile: 'default', key: 'default' };
    const podLabels = sandboxPod(input({ identity, k: none })).metadata!.labels!;
    const picks = (np: typeof egressPolicy) => Object.entries(np.spec!.podSelector!.matchLabels!).every(([k, v]) => podLabels[k] === v);
    expect(picks(nonePolicy)).toBe(true);
    expect(picks(egressPolicy)).toBe(false);
  });

  it('egress: DNS and public addresses only (cloud metadata and cluster ranges blocked, in both families); none: nothing', () => {
    const egress = tenantNetworkPolicy('i', 't', KUBERNETES_DEFAULTS).spec!.egress!;
    expect(egress).toHaveLength(2);
    expect(egress[1]!.to![0]!.ipBlock).toEqual({ cidr: '0.0.0.0/0', except: [...BLOCKED_V4] });
    expect(egress[1]!.to![1]!.ipBlock).toEqual({ cidr: '::/0', except: [...BLOCKED_V6] });
    expect(BLOCKED_V4).toContain('169.254.0.0/16');
    expect(tenantNetworkPolicy('i', 't', { ...KUBERNETES_DEFAULTS, network: 'none' }).spec!.egress).toEqual([]);
  });
});

describe('kubernetes settings', () => {
  it('merges written keys over the base; a written nodeSelector replaces the base one', () => {
    const base = kubernetesSettings.merge(kubernetesSettings.defaults(), { namespace: 'agents', nodeSelector: { a: '1' } });
    const merged = kubernetesSettings.merge(base, { memoryMb: 512, nodeSelector: { b: '2' } });
    expect(merged.namespace).toBe('agents');
    expect(merged.memoryMb).toBe(512);
    expect(merged.nodeSelector).toEqual({ b: '2' });
    expect(Object.isFrozen(merged)).toBe(true);
  });
});
