import { cpuPercent, type SandboxUsage } from '../broker/sandbox-usage.js';

/** The shortest span CPU is measured over (two reads closer than this say little). */
export const MIN_CPU_WINDOW_MS = 500;
/** A sandbox no stream has read for this long is forgotten. */
const FORGET_AFTER_MS = 10 * 60_000;
/** Samples kept per sandbox: enough that two streams reading at once still find an older one. */
const KEPT = 3;

/**
 * The latest usage samples of the sandboxes a server's overview streams read, shared by every
 * stream: CPU is the change between two samples, so a stream's first update has it wherever an
 * earlier read of that sandbox (another tab, the same tab before a reload or a reconnect) left
 * one. Keyed by tenant, profile and sandbox key; a stream only ever asks of its own sandboxes.
 *
 * @example
 * const samples = new UsageSamples();
 * samples.cpu(id, usage); // undefined: the first sample
 * samples.cpu(id, later); // percent of one core between the two
 */
export class UsageSamples {
  private readonly byId = new Map<string, SandboxUsage[]>();

  /** Records `now` and answers CPU since the newest sample at least MIN_CPU_WINDOW_MS older (undefined: none yet). */
  cpu(id: string, now: SandboxUsage): number | undefined {
    const kept = this.byId.get(id) ?? [];
    const base = [...kept].reverse().find((s) => now.sampledMs - s.sampledMs >= MIN_CPU_WINDOW_MS);
    const percent = cpuPercent(base, now);
    this.byId.delete(id);
    this.byId.set(id, [...kept, now].slice(-KEPT));
    return percent;
  }

  /** Forgets the sandboxes no stream read for FORGET_AFTER_MS. */
  prune(nowMs: number): void {
    for (const [id, kept] of this.byId) {
      const newest = kept.at(-1);
      if (newest === undefined || nowMs - newest.sampledMs > FORGET_AFTER_MS) this.byId.delete(id);
    }
  }

  get size(): number {
    return this.byId.size;
  }
}
