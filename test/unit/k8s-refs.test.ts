import { describe, expect, it } from 'vitest';
import { permissionsFor } from '../../src/backends/kubernetes/access-check.js';
import { formatRef, parseRef } from '../../src/backends/kubernetes/refs.js';
import { KUBERNETES_DEFAULTS } from '../../src/backends/kubernetes/settings.js';

describe('kubernetes sandbox refs', () => {
  it('round-trip kind, namespace and name', () => {
    for (const kind of ['pod', 'sandbox', 'claim'] as const) {
      const ref = { kind, namespace: 'berth', name: 'berth-0123456789abcdef0123abcd' };
      expect(parseRef(formatRef(ref))).toEqual(ref);
    }
  });

  it('refuse anything that could steer a request elsewhere on the API server, or another backend\'s ref', () => {
    for (const bad of [
      'pod:berth/../../secrets/x', 'pod:berth/a/exec', 'pod:kube-system/x?watch=1', 'pod:Berth/x', 'pod:berth/x%2F..',
      'secret:berth/x', 'pod:berth/', 'pod:/x', `pod:berth/${'a'.repeat(64)}`, '3f2a9c0d1e2b', '/home/u/.berth/sandboxes/local/x',
    ]) {
      expect(() => parseRef(bad), bad).toThrow(/is not a kubernetes sandbox ref/);
    }
  });
});

describe('the permissions a start-up check asks for', () => {
  const names = (over: object) => permissionsFor({ ...KUBERNETES_DEFAULTS, ...over }).map((p) => `${p.verb} ${p.apiGroup}/${p.resource}`);

  it('mode pods: pods, exec, claims, network policies; no agent-sandbox resources', () => {
    const n = names({});
    expect(n).toEqual(expect.arrayContaining(['create /pods', 'create /pods/exec', 'get /pods/exec', 'create /persistentvolumeclaims', 'create networking.k8s.io/networkpolicies']));
    expect(n.some((x) => x.includes('agents.x-k8s.io'))).toBe(false);
    expect(names({ networkPolicy: false }).some((x) => x.includes('networkpolicies'))).toBe(false);
  });

  it('configmaps (berth\'s egress CA) only for sandboxes berth\'s proxy serves in allowlist, with every verb berth uses on them', () => {
    expect(names({}).some((x) => x.includes('configmaps'))).toBe(false);
    expect(permissionsFor(KUBERNETES_DEFAULTS, true).map((p) => `${p.verb} ${p.apiGroup}/${p.resource}`).filter((x) => x.includes('configmaps'))).toEqual(['create /configmaps']);
  });

  it('mode agent-sandbox: Sandboxes, and claims only with a warm pool (pools are never read)', () => {
    expect(names({ mode: 'agent-sandbox' })).toEqual(expect.arrayContaining(['create agents.x-k8s.io/sandboxes', 'create /pods/exec']));
    expect(names({ mode: 'agent-sandbox' }).some((x) => x.includes('sandboxclaims') || x.includes('persistentvolumeclaims'))).toBe(false);
    expect(names({ mode: 'agent-sandbox', warmPool: 'p' })).toEqual(expect.arrayContaining(['create extensions.agents.x-k8s.io/sandboxclaims', 'list extensions.agents.x-k8s.io/sandboxclaims']));
    expect(names({ mode: 'agent-sandbox', warmPool: 'p' }).some((n) => n.includes('sandboxwarmpools'))).toBe(false);
  });
});
