import { describe, expect, it } from 'vitest';

describe('src/egress exports', () => {
  it('are exactly the documented API (docs/egress.md)', async () => {
    const egress = await import('../../src/egress/index.js');
    expect(Object.keys(egress).sort()).toEqual([
      'ALWAYS_DENIED', 'DEFAULT_LIMITS', 'EgressCa', 'EgressProxy', 'PLACEHOLDER_PREFIX', 'caBundle', 'checkCredentials',
      'checkEgressPolicy', 'createEgressProxy', 'decide', 'decideAddresses', 'decideName', 'egressEnv', 'egressRedactValues',
      'emptyPolicy', 'hostInList', 'openPlaceholderSecret', 'parseClientHello', 'parseCredentials', 'parseEgressPolicy',
      'placeholderFor', 'rewriteHeaders', 'sandboxCredentials', 'strayPlaceholder',
    ]);
  });
});
