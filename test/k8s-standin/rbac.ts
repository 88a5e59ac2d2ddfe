import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { parseAllDocuments } from 'yaml';

/*
 * RBAC as a real API server applies it to berth's token: the rules of the Role in
 * deploy/rbac.yaml (what an operator applies), and nothing else. A stand-in that allowed every
 * call certified a berth that watched pods without the `watch` verb; this one answers such a
 * call 403 Forbidden, as a cluster with the shipped Role would.
 */

/** One rule of a Role: these verbs on these resources (`pods`, `pods/exec`) of these API groups. */
export interface RoleRule {
  apiGroups: readonly string[];
  resources: readonly string[];
  verbs: readonly string[];
}

/** deploy/rbac.yaml of this checkout. */
export const DEPLOY_RBAC = fileURLToPath(new URL('../../deploy/rbac.yaml', import.meta.url));

/** The rules of the one Role in `file` (a kubectl-applicable multi-document YAML). */
export function roleRules(file = DEPLOY_RBAC): RoleRule[] {
  const roles = parseAllDocuments(readFileSync(file, 'utf8')).map((d) => d.toJS() as { kind?: string; rules?: RoleRule[] }).filter((d) => d?.kind === 'Role');
  if (roles.length !== 1) throw new Error(`${file} holds ${roles.length} Roles, not one`);
  return roles[0]!.rules ?? [];
}

/**
 * Whether `rules` let a caller `verb` on `resource` (with its subresource: `pods/exec`) of API
 * group `group` (`''` the core group): RBAC's union of rules, no wildcard berth's Role would use
 * (a `*` is honoured as RBAC reads it).
 */
export function rbacAllows(rules: readonly RoleRule[], verb: string, group: string, resource: string): boolean {
  const has = (list: readonly string[], v: string): boolean => list.includes('*') || list.includes(v);
  return rules.some((r) => has(r.apiGroups, group) && has(r.resources, resource) && has(r.verbs, verb));
}
