import { describe, expect, it } from 'vitest';
import { closeObjects, loadValidator } from '../schemas/validate.js';

const validator = loadValidator();

function pod(extra: Record<string, unknown> = {}, container: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name: 'berth-0123456789abcdef01234567', labels: { 'berth.managed': 'true' } },
    spec: { containers: [{ name: 'sandbox', image: 'busybox', ...container }], ...extra },
  };
}

describe('vendored schema validator', () => {
  it('knows the kinds berth sends and the RBAC kinds of deploy/', () => {
    expect(validator.kinds).toEqual(expect.arrayContaining([
      'v1/Pod', 'v1/PersistentVolumeClaim', 'v1/ServiceAccount', 'networking.k8s.io/v1/NetworkPolicy',
      'rbac.authorization.k8s.io/v1/Role', 'rbac.authorization.k8s.io/v1/RoleBinding',
      'agents.x-k8s.io/v1beta1/Sandbox', 'extensions.agents.x-k8s.io/v1beta1/SandboxClaim',
    ]));
  });

  it('accepts a minimal valid pod', () => {
    expect(validator.errors(pod())).toEqual([]);
  });

  it('rejects an unknown field at any depth, naming it', () => {
    expect(validator.errors({ ...pod(), bogus: 1 }).join('\n')).toContain('unknown field "bogus"');
    expect(validator.errors(pod({ sercurityContext: {} })).join('\n')).toContain('unknown field "sercurityContext"');
    expect(validator.errors(pod({}, { securityContext: { runAsNonroot: true } })).join('\n')).toContain('unknown field "runAsNonroot"');
  });

  it('rejects wrong types, missing required fields and out-of-range integers', () => {
    expect(validator.errors(pod({ automountServiceAccountToken: 'false' })).join('\n')).toContain('must be boolean');
    expect(validator.errors({ apiVersion: 'v1', kind: 'Pod', metadata: { name: 'x' }, spec: {} }).join('\n')).toContain("must have required property 'containers'");
    expect(validator.errors(pod({}, { securityContext: { runAsUser: 1.5 } })).join('\n')).toContain('must match format "int64"');
  });

  it('rejects metadata the API server refuses: names, label keys and values', () => {
    const bad = pod();
    (bad['metadata'] as Record<string, unknown>)['name'] = 'Berth_Pod';
    expect(validator.errors(bad).join('\n')).toContain('RFC 1123 subdomain');
    const badLabel = pod();
    (badLabel['metadata'] as Record<string, unknown>)['labels'] = { 'berth.key': 'session:s1' };
    expect(validator.errors(badLabel).join('\n')).toContain('not a valid label value');
  });

  it('checks custom resources strictly too, metadata as ObjectMeta', () => {
    const sandbox = {
      apiVersion: 'agents.x-k8s.io/v1beta1',
      kind: 'Sandbox',
      metadata: { name: 'x', labelz: {} },
      spec: { podTemplate: { metadata: { name: 'not-allowed-here' }, spec: { containers: [{ name: 'c', image: 'i' }] } } },
    };
    const text = validator.errors(sandbox).join('\n');
    expect(text).toContain('unknown field "labelz"');
    expect(text).toContain('unknown field "name"');
  });

  it('refuses a kind it has no schema for', () => {
    expect(validator.errors({ apiVersion: 'apps/v1', kind: 'Deployment', metadata: { name: 'x' } })).toEqual(['no vendored schema for apiVersion apps/v1 kind Deployment']);
  });

  it('closes only objects that say nothing of other keys', () => {
    const closed = closeObjects({
      type: 'object',
      properties: {
        open: { type: 'object', additionalProperties: { type: 'string' } },
        kept: { type: 'object', properties: { a: { type: 'string' } }, 'x-kubernetes-preserve-unknown-fields': true },
        nested: { type: 'object', properties: { b: { type: 'string' } } },
      },
    }) as Record<string, Record<string, Record<string, unknown>>>;
    expect(closed['additionalProperties']).toBe(false);
    expect(closed['properties']!['open']!['additionalProperties']).toEqual({ type: 'string' });
    expect(closed['properties']!['kept']!['additionalProperties']).toBeUndefined();
    expect(closed['properties']!['nested']!['additionalProperties']).toBe(false);
  });
});
