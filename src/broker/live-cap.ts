import { BerthError } from '../errors.js';
import type { Sandbox } from '../backends/backend.js';
import type { Logger } from '../logging/logger.js';
import { inUseNow, type LiveSandbox, type LiveSandboxes } from './live-sandboxes.js';

export interface LiveCapOptions {
  /** `limits.liveSandboxes`: undefined bounds nothing. */
  max: number | undefined;
  lives: Pick<LiveSandboxes, 'all'>;
  /** The removal part's hibernation: under the sandbox's lock, after `stillIdle` says yes again. */
  hibernate(live: LiveSandbox, stillIdle: () => Promise<boolean>): Promise<boolean>;
  /** Whether a job of the sandbox still runs (the job probe's). */
  jobs: { activeIn(digest: string, sandbox: Sandbox): Promise<boolean> };
  /** The start gate: hibernations to make room go through it too, and as many at once as it admits. */
  gate: { readonly width: number; run<T>(fn: () => Promise<T>): Promise<T> };
  /** A sandbox hibernated to make room (the metrics' and dashboard's reaped count). */
  hibernated?: (live: LiveSandbox) => void;
  log: Logger;
}

/** How often the waiting calls' pump looks again while no live sandbox may go. */
const LOOK_EVERY_MS = 50;
/** A sandbox that could not go (a busy shell, a job) is tried again after this long. */
const RETRY_AFTER_MS = 1_000;

interface Waiter {
  key: string;
  waitMs: number;
  deadline: number;
  resolve(release: () => void): void;
  reject(err: Error): void;
}

/**
 * The bound on the sandboxes this process keeps live at once (`limits.liveSandboxes`, all tenants
 * together): an engine holds a running sandbox's processes, memory and descriptors however idle it
 * is (dockerd here stops near 1,700, ~11 descriptors each), while a hibernated one costs its files only. A call that
 * brings one more sandbox up while the bound is reached waits in line while the least recently used
 * idle persistent ones hibernate (no command in flight, no busy shell, no running job, hibernation
 * not turned off for its profile, no other process holding it), as the idle sweep would later,
 * through the start gate. A call still without room after its own timeout (`exec.timeoutSeconds`:
 * a burst of more calls than the engine turns over in that time) is refused (`at_capacity`,
 * retrying later may work) and nothing is started for it.
 *
 * One pump serves the line, so a burst of thousands of calls costs one look at the live sandboxes
 * per step, not one per waiting call.
 */
export class LiveCap {
  /** Slots taken by sandboxes being brought up, not live yet. */
  private starting = 0;
  /** Live sandboxes being hibernated to make room. */
  private readonly going = new Set<LiveSandbox>();
  /** Sandboxes tried without success lately: looked at again once the line moved, or after RETRY_AFTER_MS. */
  private readonly tried = new Set<LiveSandbox>();
  private triedSince = 0;
  private readonly line: Waiter[] = [];
  private pumping: Promise<void> | undefined;

  constructor(private readonly o: LiveCapOptions) {}

  /**
   * A slot for one more live sandbox, once there is one (waiting at most `waitMs`): call the
   * returned function when the sandbox is live (it counts as live from then on) or failed to come up.
   *
   * @throws BerthError `at_capacity` when no room was made within the wait.
   */
  reserve(key: string, waitMs: number): Promise<() => void> {
    if (this.o.max === undefined) return Promise.resolve(() => undefined);
    if (this.line.length === 0 && this.hasRoom()) return Promise.resolve(this.take());
    return new Promise((resolve, reject) => {
      this.line.push({ key, waitMs, deadline: Date.now() + waitMs, resolve, reject });
      this.pumping ??= this.pump().finally(() => {
        this.pumping = undefined;
      });
    });
  }

  private hasRoom(): boolean {
    return this.o.lives.all().length + this.starting < this.o.max!;
  }

  private take(): () => void {
    this.starting++;
    let released = false;
    return () => {
      if (!released) this.starting--;
      released = true;
    };
  }

  /** Gives room to the line in order, hibernating as many sandboxes at once as the gate admits, until the line is empty. */
  private async pump(): Promise<void> {
    let moved: () => void = () => undefined;
    let changed = new Promise<void>((r) => (moved = r));
    const step = (): void => {
      moved();
      changed = new Promise<void>((r) => (moved = r));
    };
    while (this.line.length > 0) {
      const now = Date.now();
      for (const w of this.line.filter((x) => x.deadline <= now)) {
        this.line.splice(this.line.indexOf(w), 1);
        w.reject(this.refusal(w));
      }
      while (this.line.length > 0 && this.hasRoom()) {
        this.line.shift()!.resolve(this.take());
        this.tried.clear();
      }
      if (this.line.length === 0) break;
      const wanted = Math.min(this.line.length, this.o.gate.width) - this.going.size;
      for (const victim of this.victims(wanted)) {
        this.going.add(victim);
        void this.hibernate(victim).finally(() => {
          this.going.delete(victim);
          step();
        });
      }
      await Promise.race([changed, new Promise((r) => setTimeout(r, LOOK_EVERY_MS))]);
      if (Date.now() - this.triedSince >= RETRY_AFTER_MS) {
        this.tried.clear();
        this.triedSince = Date.now();
      }
    }
  }

  /** Up to `n` live sandboxes that may hibernate, least recently used first. */
  private victims(n: number): LiveSandbox[] {
    if (n <= 0) return [];
    return this.o.lives.all()
      .filter((l) => !this.going.has(l) && !this.tried.has(l) && !l.record.ephemeral && l.hibernateMs > 0 && l.inflight === 0)
      .sort((a, b) => a.lastActivityMs - b.lastActivityMs)
      .slice(0, n);
  }

  private async hibernate(victim: LiveSandbox): Promise<void> {
    try {
      const done = await this.o.gate.run(() => this.o.hibernate(victim, () => this.idle(victim)));
      if (!done) {
        this.tried.add(victim);
        return;
      }
      this.o.hibernated?.(victim);
      this.o.log.child('berth:reaper').info(`sandbox ${victim.record.key} hibernated to make room (limits.liveSandboxes ${this.o.max})`);
    } catch (err) {
      this.tried.add(victim);
      this.o.log.child('berth:reaper').warn(`sandbox ${victim.record.key} could not hibernate to make room: ${String(err)}`);
    }
  }

  private async idle(live: LiveSandbox): Promise<boolean> {
    return !(await inUseNow(live, this.o.jobs)) && live.inflight === 0;
  }

  private refusal(w: Waiter): BerthError {
    return new BerthError(
      'at_capacity',
      `sandbox "${w.key}" cannot start: this berth keeps ${this.o.max} sandboxes live at once (limits.liveSandboxes), and within ` +
        `${Math.round(w.waitMs / 1000)} s (the call's exec.timeoutSeconds) no room was made: every live one was busy, ephemeral or kept ` +
        'from hibernating, or more calls were waiting than the engine could stop and start in that time; retry later, or raise ' +
        'limits.liveSandboxes (each live sandbox holds its processes and engine resources)',
    );
  }
}
