import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parseAllDocuments } from 'yaml';
import { REQUIRED_PERMISSIONS } from '../../src/backends/kubernetes/permissions.js';
import { loadValidator } from '../schemas/validate.js';

const validator = loadValidator();

function docs(file: string): Record<string, unknown>[] {
  return parseAllDocuments(readFileSync(new URL(`../../deploy/${file}`, import.meta.url), 'utf8')).map((d) => d.toJSON() as Record<string, unknown>);
}

interface Rule { apiGroups: string[]; resources: string[]; verbs: string[] }

function grants(rules: Rule[]): Set<string> {
  const out = new Set<string>();
  for (const r of rules) for (const g of r.apiGroups) for (const res of r.resources) for (const v of r.verbs) out.add(`${g}|${res}|${v}`);
  return out;
}

describe('deploy/ manifests', () => {
  it('every document validates against the vendored schemas', () => {
    const all = [...docs('namespace.yaml'), ...docs('rbac.yaml')];
    expect(all.map((d) => d['kind'])).toEqual(['Namespace', 'ServiceAccount', 'Role', 'RoleBinding']);
    for (const d of all) validator.assertValid(d);
  });

  it('the Role grants exactly what the backend calls: nothing missing, nothing more, no wildcard', () => {
    const role = docs('rbac.yaml').find((d) => d['kind'] === 'Role') as { rules: Rule[] };
    const granted = grants(role.rules);
    const needed = new Set(REQUIRED_PERMISSIONS.flatMap((p) => p.verbs.map((v) => `${p.apiGroup}|${p.resource}|${v}`)));
    expect([...granted].sort()).toEqual([...needed].sort());
    expect([...granted].some((g) => g.includes('*'))).toBe(false);
    // Calls berth never makes are not asked for (policies are only created, pools never read, claims never listed).
    for (const unused of ['networking.k8s.io|networkpolicies|get', 'networking.k8s.io|networkpolicies|list', 'networking.k8s.io|networkpolicies|delete', '|persistentvolumeclaims|list', 'extensions.agents.x-k8s.io|sandboxwarmpools|get']) {
      expect(granted.has(unused), unused).toBe(false);
    }
  });

  it('binds the Role to berth\'s service account in the sandbox namespace, and the namespace enforces restricted', () => {
    const all = docs('rbac.yaml');
    const binding = all.find((d) => d['kind'] === 'RoleBinding') as { roleRef: { name: string }; subjects: { kind: string; name: string; namespace: string }[] };
    expect(binding.roleRef.name).toBe('berth-sandboxes');
    expect(binding.subjects).toEqual([{ kind: 'ServiceAccount', name: 'berth', namespace: 'berth' }]);
    const ns = docs('namespace.yaml')[0] as { metadata: { labels: Record<string, string> } };
    expect(ns.metadata.labels['pod-security.kubernetes.io/enforce']).toBe('restricted');
  });
});
