import { availableParallelism } from 'node:os';

/**
 * Bounds how many sandbox starts one broker runs at once: creating or adopting a sandbox, and
 * opening a shell or warden in it. A burst of new conversations (fifty chat users at once) then
 * queues in berth, first come first served, instead of asking the engine for fifty container
 * starts and a hundred execs at the same moment. Each start's own timeout counts from when it
 * begins, so a long queue is never mistaken for a sandbox whose shell did not start.
 *
 * @example
 * const gate = new StartGate(4);
 * const sandbox = await gate.run(() => backend.ensure(spec, ref));
 */
export class StartGate {
  private running = 0;
  private readonly waiting: Array<() => void> = [];
  /** Background starts (warm-pool fills): served only when no foreground start waits. */
  private readonly waitingLow: Array<() => void> = [];

  constructor(readonly width: number) {
    if (!Number.isInteger(width) || width < 1) throw new RangeError(`a start gate needs a width of at least 1, got ${width}`);
  }

  /** Starts at the same time on this machine: twice its cores (the engine's work is half waiting), at least 4. */
  static forThisMachine(): StartGate {
    return new StartGate(Math.max(4, 2 * availableParallelism()));
  }

  /** Runs `fn` once fewer than `width` starts run; the slot passes to the next in line when it settles. */
  async run<T>(fn: () => Promise<T>): Promise<T> {
    if (this.running < this.width) this.running += 1;
    else await new Promise<void>((resolve) => this.waiting.push(resolve));
    return this.holding(fn);
  }

  /**
   * Runs `fn` like `run`, but behind every foreground start: it takes a free slot only while no
   * `run` waits, and a slot that frees goes to a waiting `run` first. A warm-pool fill never
   * delays a session's own start by more than the fills already running.
   */
  async runBackground<T>(fn: () => Promise<T>): Promise<T> {
    if (this.running < this.width && this.waiting.length === 0) this.running += 1;
    else await new Promise<void>((resolve) => this.waitingLow.push(resolve));
    return this.holding(fn);
  }

  private async holding<T>(fn: () => Promise<T>): Promise<T> {
    try {
      return await fn();
    } finally {
      const next = this.waiting.shift() ?? this.waitingLow.shift();
      // The slot is handed over, not freed: a start arriving meanwhile cannot jump the queue.
      if (next !== undefined) next();
      else this.running -= 1;
    }
  }

  /** Starts waiting for a slot (diagnostics, tests). */
  get queued(): number {
    return this.waiting.length + this.waitingLow.length;
  }
}
