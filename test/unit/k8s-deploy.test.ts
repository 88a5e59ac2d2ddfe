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

/**
 * Where `kubectl apply -n <namespace>` puts each object: kubectl refuses a file whose object names
 * another namespace, and a namespaced RoleBinding's ServiceAccount subject without a namespace is
 * the one in the binding's own (RBAC's appliesToUser).
 */
function appliedIn(namespace: string, all: Record<string, unknown>[]): { kind: string; name: string; namespace: string; subjects?: string[] }[] {
  return all.map((d) => {
    const meta = d['metadata'] as { name: string; namespace?: string };
    if (meta.namespace !== undefined && meta.namespace !== namespace) throw new Error(`kubectl apply -n ${namespace}: ${String(d['kind'])} ${meta.name} names namespace ${meta.namespace}`);
    const subjects = (d['subjects'] as { kind: string; name: string; namespace?: string }[] | undefined)?.map((s) => `${s.kind} ${s.namespace ?? namespace}/${s.name}`);
    return { kind: String(d['kind']), name: meta.name, namespace, ...(subjects === undefined ? {} : { subjects }) };
  });
}

describe('deploy/ manifests', () => {
  it('every document validates against the vendored schemas', () => {
    const all = docs('rbac.yaml');
    expect(all.map((d) => d['kind'])).toEqual(['ServiceAccount', 'Role', 'RoleBinding']);
    for (const d of all) validator.assertValid(d);
  });

  it('the Role grants exactly what the backend calls: nothing missing, nothing more, no wildcard', () => {
    const role = docs('rbac.yaml').find((d) => d['kind'] === 'Role') as { rules: Rule[] };
    const granted = grants(role.rules);
    const needed = new Set(REQUIRED_PERMISSIONS.flatMap((p) => p.verbs.map((v) => `${p.apiGroup}|${p.resource}|${v}`)));
    expect([...granted].sort()).toEqual([...needed].sort());
    expect([...granted].some((g) => g.includes('*'))).toBe(false);
    // Calls berth never makes are not asked for (policies are never changed or deleted, pools never read, configmaps never deleted).
    for (const unused of ['networking.k8s.io|networkpolicies|update', 'networking.k8s.io|networkpolicies|patch', 'networking.k8s.io|networkpolicies|delete', '|configmaps|delete', 'extensions.agents.x-k8s.io|sandboxwarmpools|get']) {
      expect(granted.has(unused), unused).toBe(false);
    }
  });

  it('applies in any namespace (kubectl apply -n, as the README and the start-up check say): the Role is bound to the ServiceAccount of that namespace', () => {
    for (const ns of ['berth', 'agents-prod']) {
      expect(appliedIn(ns, docs('rbac.yaml'))).toEqual([
        { kind: 'ServiceAccount', name: 'berth', namespace: ns },
        { kind: 'Role', name: 'berth-sandboxes', namespace: ns },
        { kind: 'RoleBinding', name: 'berth-sandboxes', namespace: ns, subjects: [`ServiceAccount ${ns}/berth`] },
      ]);
    }
    expect((docs('rbac.yaml')[2] as { roleRef: { name: string } }).roleRef.name).toBe('berth-sandboxes');
    const readme = readFileSync(new URL('../../deploy/README.md', import.meta.url), 'utf8');
    expect(readme).toContain('kubectl apply -n "$NS" -f deploy/rbac.yaml');
    expect(readme).toContain('pod-security.kubernetes.io/enforce=restricted');
  });
});
