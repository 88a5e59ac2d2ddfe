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
  /** Background starts running; they never take the last slot (while the gate has more than one). */
  private runningLow = 0;

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
    return this.holding(fn, false);
  }

  /**
   * Runs `fn` like `run`, but behind every foreground start: it takes a free slot only while no
   * `run` waits, never the last one, and a slot that frees goes to a waiting `run` first. So a
   * warm-pool fill never makes a session's own start wait.
   */
  async runBackground<T>(fn: () => Promise<T>): Promise<T> {
    if (this.running < this.width && this.runningLow < this.lowWidth && this.waiting.length === 0) {
      this.running += 1;
      this.runningLow += 1;
    } else {
      await new Promise<void>((resolve) => this.waitingLow.push(resolve));
    }
    return this.holding(fn, true);
  }

  private get lowWidth(): number {
    return Math.max(1, this.width - 1);
  }

  private async holding<T>(fn: () => Promise<T>, low: boolean): Promise<T> {
    try {
      return await fn();
    } finally {
      if (low) this.runningLow -= 1;
      // The slot is handed over, not freed: a start arriving meanwhile cannot jump the queue.
      const next = this.waiting.shift();
      if (next !== undefined) {
        next();
      } else if (this.waitingLow.length > 0 && this.runningLow < this.lowWidth) {
        this.runningLow += 1;
        this.waitingLow.shift()!();
      } else {
        this.running -= 1;
      }
    }
  }

  /** Starts waiting for a slot (diagnostics, tests). */
  get queued(): number {
    return this.waiting.length + this.waitingLow.length;
  }
}
