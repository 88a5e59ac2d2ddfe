import { describe, expect, it } from 'vitest';
import { quotaUsedUp } from '../../src/backends/kubernetes/admission-check.js';

/* The start-up dry run's reading of a ResourceQuota refusal (the quota admission plugin's wording). */

describe('quotaUsedUp', () => {
  const refusal = (requested: string, used: string, limited: string) =>
    `pods "berth-x" is forbidden: exceeded quota: compute, requested: ${requested}, used: ${used}, limited: ${limited}`;

  it('full now (the pod alone fits): true; a pod that can never fit: false', () => {
    expect(quotaUsedUp(refusal('limits.cpu=2', 'limits.cpu=3', 'limits.cpu=4'))).toBe(true);
    expect(quotaUsedUp(refusal('limits.cpu=2', 'limits.cpu=0', 'limits.cpu=1'))).toBe(false);
    expect(quotaUsedUp(refusal('limits.cpu=2,limits.memory=2Gi', 'limits.cpu=4,limits.memory=1Gi', 'limits.cpu=4,limits.memory=2Gi'))).toBe(true);
    expect(quotaUsedUp(refusal('limits.cpu=2,limits.memory=2Gi', 'limits.cpu=0,limits.memory=0', 'limits.cpu=4,limits.memory=1536Mi'))).toBe(false);
    expect(quotaUsedUp(refusal('requests.cpu=500m', 'requests.cpu=1800m', 'requests.cpu=2'))).toBe(true);
    expect(quotaUsedUp(refusal('count/pods=1', 'count/pods=10', 'count/pods=10'))).toBe(true);
  });

  it('every quantity form the API server prints; a figure it cannot read, or a quota not counted yet, is not "never fits"', () => {
    expect(quotaUsedUp(refusal('requests.ephemeral-storage=1Gi', 'requests.ephemeral-storage=1Pi', 'requests.ephemeral-storage=1Pi'))).toBe(true);
    expect(quotaUsedUp(refusal('requests.ephemeral-storage=2Ei', 'requests.ephemeral-storage=0', 'requests.ephemeral-storage=1Ei'))).toBe(false);
    expect(quotaUsedUp(refusal('limits.cpu=1e3', 'limits.cpu=0', 'limits.cpu=2k'))).toBe(true);
    expect(quotaUsedUp(refusal('limits.cpu=2', 'limits.cpu=0', 'limits.cpu=weird'))).toBe(true);
    expect(quotaUsedUp('pods "berth-x" is forbidden: status unknown for quota: compute, resources: limits.cpu')).toBe(true);
    expect(quotaUsedUp('pods "berth-x" is forbidden: violates PodSecurity "restricted:latest": privileged')).toBe(false);
  });
});
