import { describe, expect, it } from 'vitest';
import { passedVerdict } from '../../src/broker/sandbox-egress.js';

// Which socket a keeper serves of those its CLI call passed (the namespace and context checks of
// SandboxEgress.passedFor): the docker e2e test reaches only the served case.
describe('passedVerdict: a passed egress socket is served only where it still fits', () => {
  const passed = { ns: 'net:[4026532001]', holder: 'cli:1' };

  it('serves it in the same namespace when the store has no row, with no row to hand back', () => {
    expect(passedVerdict(passed, 'net:[4026532001]', undefined, 'ctx')).toEqual({ serve: true, row: undefined });
  });

  it("serves it with the passer's row for the same context, to hand back if the keeper lets go first", () => {
    const row = { holder: 'cli:1', digest: 'ctx' };
    expect(passedVerdict(passed, 'net:[4026532001]', row, 'ctx')).toEqual({ serve: true, row });
  });

  it('refuses it once the sandbox is in another namespace (restarted in between)', () => {
    expect(passedVerdict(passed, 'net:[4026532999]', undefined, 'ctx')).toEqual({ serve: false, why: 'the sandbox is in another namespace now' });
  });

  it("refuses it when the sandbox's namespace cannot be read", () => {
    expect(passedVerdict(passed, undefined, { holder: 'cli:1', digest: 'ctx' }, 'ctx')).toEqual({ serve: false, why: 'the sandbox\'s namespace cannot be read' });
  });

  it("refuses it when the passer's row names another egress context (other credentials or policy)", () => {
    expect(passedVerdict(passed, 'net:[4026532001]', { holder: 'cli:1', digest: 'other' }, 'ctx')).toEqual({ serve: false, why: 'another egress context' });
  });

  it("leaves a third process's row to the claim: served here, nothing to hand back", () => {
    expect(passedVerdict(passed, 'net:[4026532001]', { holder: 'server:9', digest: 'other' }, 'ctx')).toEqual({ serve: true, row: undefined });
  });
});
