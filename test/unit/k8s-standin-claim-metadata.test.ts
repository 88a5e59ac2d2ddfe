import { describe, expect, it } from 'vitest';
import { additionalPodMetadataProblem, UPSTREAM_DEFAULT_LABEL_DOMAINS } from '../k8s-standin/claim-metadata.js';

/*
 * The stand-in's claim controller refuses what agent-sandbox v0.5's refuses in a SandboxClaim's
 * additionalPodMetadata (extensions/controllers/sandboxclaim_controller.go,
 * validateAdditionalPodMetadata), so a berth that sends such keys fails against it as it would on
 * a cluster.
 */

describe('stand-in claim controller: additionalPodMetadata as agent-sandbox validates it', () => {
  const check = (labels: Record<string, string>, annotations: Record<string, string> = {}, allowed: readonly string[] = ['berth.dev']) =>
    additionalPodMetadataProblem({ labels, annotations }, allowed);

  it('refuses a label key without a domain prefix (every key berth used to send)', () => {
    expect(check({ 'berth.managed': 'true' })).toBe(
      'invalid additionalPodMetadata: failed to validate label "berth.managed": label "berth.managed" must have a domain prefix (e.g. \'sandbox.users.io/my-label\') to prevent opting into unintended policy domains',
    );
  });

  it('refuses a label domain the operator did not allow; the default allows only sandbox.users.io', () => {
    expect(check({ 'berth.dev/managed': 'true' }, {}, UPSTREAM_DEFAULT_LABEL_DOMAINS)).toContain('label domain "berth.dev" is not in the allowlist');
    expect(check({ 'sandbox.users.io/x': 'y' }, {}, UPSTREAM_DEFAULT_LABEL_DOMAINS)).toBeUndefined();
    expect(check({ 'other.example/x': 'y' })).toContain('not in the allowlist');
  });

  it('admits an allowed domain and its subdomains, with valid values only', () => {
    expect(check({ 'berth.dev/managed': 'true', 'a.berth.dev/x': 'y' })).toBeUndefined();
    expect(check({ 'berth.dev/key': 'session:s1' })).toContain('invalid label value');
    expect(check({ 'berth.dev/': 'x' })).toContain('invalid label key');
  });

  it('annotations: unprefixed keys pass, system domains do not', () => {
    expect(check({}, { 'berth.identity': 'x', 'berth.dev/identity': 'y' })).toBeUndefined();
    expect(check({}, { 'pod-security.kubernetes.io/enforce': 'privileged' })).toContain('restricted system domain');
    expect(check({}, { 'agents.x-k8s.io/claim-uid': 'x' })).toContain('restricted system domain');
    expect(check({}, { 'cluster-autoscaler.kubernetes.io/safe-to-evict': 'true' })).toBeUndefined();
  });
});
