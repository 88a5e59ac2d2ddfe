import { BerthError } from '../errors.js';
import type { Logger } from '../logging/logger.js';

/** What the close asks of the parts, in the order it goes (see `closeParts`). */
export interface ClosingParts {
  reapers: { stop(): Promise<void> };
  lives: { drained(): Promise<void>; closeAll(): Promise<void> };
  closer: { closeHeld(): Promise<void> };
  warm: { close(): Promise<void> };
  removal: { releaseUnusedAtClose(): Promise<void> };
  backends: { closeAll(): Promise<void> };
  egress: { close(): Promise<void> };
  store: { close(): void };
  log: Logger;
}

/**
 * Whether a broker still takes calls: open until its close begins, then every new call is
 * refused (`shutting_down`) and the parts that run in the background see `signal` aborted.
 */
export class BrokerLifecycle {
  private readonly controller = new AbortController();
  private closing: Promise<void> | undefined;

  /** Aborted when the close begins. */
  get signal(): AbortSignal {
    return this.controller.signal;
  }

  assertOpen(): void {
    if (this.controller.signal.aborted) throw new BerthError('shutting_down', 'berth is shutting down; retry the call on a running berth');
  }

  /** Begins the close once (aborts `signal`, then runs `steps`); every call gets that one close. */
  close(steps: () => Promise<void>): Promise<void> {
    if (this.closing === undefined) {
      this.controller.abort();
      this.closing = steps();
    }
    return this.closing;
  }
}

/**
 * The close of a broker's parts: the reapers stop (their pass under way ends first); the calls in
 * flight get up to `graceMs` to end (the close goes on when the last one ends, or at the
 * deadline); the sessions this process holds are closed (their ephemeral sandboxes removed); the
 * warm pools empty; every shell closes (a shell's state snapshot is kept in its sandbox; the rest
 * of the sandboxes stay as they are); the engine objects left unused by this process's removals
 * go; the engines and the store are let go.
 */
export async function closeParts(parts: ClosingParts, graceMs: number): Promise<void> {
  await parts.reapers.stop();
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([parts.lives.drained(), new Promise<void>((resolve) => (timer = setTimeout(resolve, graceMs)))]);
  clearTimeout(timer);
  await parts.closer.closeHeld();
  await parts.warm.close().catch((e: unknown) => parts.log.child('berth:pool').warn(`warm pools at close: ${String(e)}`));
  await parts.lives.closeAll();
  await parts.removal.releaseUnusedAtClose();
  await parts.egress.close().catch((e: unknown) => parts.log.child('berth:egress').warn(`egress at close: ${String(e)}`));
  await parts.backends.closeAll();
  parts.store.close();
}
