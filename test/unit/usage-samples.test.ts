import { describe, expect, it } from 'vitest';
import type { SandboxUsage } from '../../src/backends/backend.js';
import { MIN_CPU_WINDOW_MS, UsageSamples } from '../../src/server/usage-samples.js';

const at = (sampledMs: number, cpuNanos: number): SandboxUsage => ({
  sampledMs, cpuNanos, memoryBytes: 1, memoryLimitBytes: undefined, processes: 1, processLimit: undefined,
});

describe('the overview streams\' shared CPU samples', () => {
  it('a first sample has no CPU; a later read (by any stream) has it against the earlier one', () => {
    const s = new UsageSamples();
    expect(s.cpu('a', at(1_000, 0))).toBeUndefined();
    // Another stream's first update, a second later: CPU at once.
    expect(s.cpu('a', at(2_000, 250_000_000))).toBe(25);
  });

  it('two reads closer than the window measure against an older sample, not over a few milliseconds', () => {
    const s = new UsageSamples();
    s.cpu('a', at(1_000, 0));
    s.cpu('a', at(2_000, 500_000_000));
    expect(s.cpu('a', at(2_000 + MIN_CPU_WINDOW_MS - 1, 749_500_000))).toBe(50);
  });

  it('sandboxes are apart, and one no stream read for ten minutes is forgotten', () => {
    const s = new UsageSamples();
    s.cpu('a', at(0, 0));
    s.cpu('b', at(590_000, 0));
    expect(s.cpu('c', at(1_000, 0))).toBeUndefined();
    s.prune(602_000);
    expect(s.size).toBe(1);
  });
});
