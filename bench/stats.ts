/** Percentiles over durations in ms. */
export function percentile(samples: number[], p: number): number {
  const sorted = [...samples].sort((a, b) => a - b);
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[i] ?? NaN;
}

/**
 * Calls made before measuring a hot loop. berth's call path is JavaScript that V8 optimises only
 * after a few thousand runs (the first 500 local execs cost ~3x the steady state): a server runs
 * warm, so the ratios compare steady states, and the baselines get the same warm-up.
 */
export const WARMUP_CALLS = 1500;

export async function timeMany(n: number, fn: () => Promise<unknown>, warmup = WARMUP_CALLS): Promise<number[]> {
  for (let i = 0; i < warmup; i++) await fn();
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    const t = process.hrtime.bigint();
    await fn();
    out.push(Number(process.hrtime.bigint() - t) / 1e6);
  }
  return out;
}

/** Times `fns` in turns (one sample of each per round), so load that comes and goes hits all alike. */
export async function interleaved(n: number, fns: Array<() => Promise<unknown>>, warmup = WARMUP_CALLS): Promise<number[][]> {
  for (let i = 0; i < warmup; i++) for (const fn of fns) await fn();
  const out = fns.map(() => [] as number[]);
  for (let i = 0; i < n; i++) {
    for (let k = 0; k < fns.length; k++) {
      const t = process.hrtime.bigint();
      await fns[k]!();
      out[k]!.push(Number(process.hrtime.bigint() - t) / 1e6);
    }
  }
  return out;
}

/** `(target <= 1.5x: met)`: a figure's target and whether this run met it. */
export function verdict(text: string, met: boolean): string {
  return `(target ${text}: ${met ? 'met' : 'missed'})`;
}

export function fmt(ms: number): string {
  return ms < 1 ? `${(ms * 1000).toFixed(0)} µs` : `${ms.toFixed(2)} ms`;
}

export function row(name: string, samples: number[]): { name: string; p50: number; p95: number } {
  const r = { name, p50: percentile(samples, 50), p95: percentile(samples, 95) };
  console.log(`  ${name.padEnd(44)} p50 ${fmt(r.p50).padStart(10)}   p95 ${fmt(r.p95).padStart(10)}   (n=${samples.length})`);
  return r;
}
