import { BerthError } from '../errors.js';
import type { Logger } from '../logging/logger.js';
import type { LiveSandbox } from './live-sandboxes.js';

/** What the close asks of the parts, in the order it goes (see `closeParts`). */
export interface ClosingParts {
  reapers: { stop(): Promise<void> };
  lives: { drained(): Promise<void>; closeAll(): Promise<void>; all(): LiveSandbox[] };
  closer: { closeHeld(): Promise<void> };
  warm: { close(): Promise<void> };
  removal: { releaseUnusedAtClose(): Promise<void> };
  backends: { closeAll(): Promise<void> };
  egress: { close(): Promise<void>; holds(ref: string): boolean };
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
  // Seen before the sessions close (their shells know their jobs); said of those that stay.
  const stranded = await jobsLosingEgress(parts);
  await parts.closer.closeHeld();
  await parts.warm.close().catch((e: unknown) => parts.log.child('berth:pool').warn(`warm pools at close: ${String(e)}`));
  for (const live of stranded.filter((l) => parts.lives.all().includes(l))) {
    parts.log.child('berth:egress').warn(
      `sandbox ${live.record.key}: a background job started in it may still run, and its egress proxy lived in this berth process, ` +
        'which ends now: such a job has no network from here on, unless a berth serve or berth mcp of this home has used the sandbox (it ' +
        'takes the proxy over within a second). Start jobs that need the network through berth serve',
    );
  }
  await parts.lives.closeAll();
  await parts.removal.releaseUnusedAtClose();
  await parts.egress.close().catch((e: unknown) => parts.log.child('berth:egress').warn(`egress at close: ${String(e)}`));
  await parts.backends.closeAll();
  parts.store.close();
}

/**
 * The live sandboxes whose egress proxy this process serves and whose shells reported a background
 * job after their last command (what the shells know, without asking the sandbox: a close never
 * waits on an engine for it): they lose their network when the process ends (the proxy listens in
 * them from here), which the close says on the log (a CLI call's stderr), since such a job would
 * otherwise fail later with no clue why.
 */
async function jobsLosingEgress(parts: ClosingParts): Promise<LiveSandbox[]> {
  const out: LiveSandbox[] = [];
  for (const live of parts.lives.all()) {
    if (parts.egress.holds(live.sandbox.ref) && (await live.shells.hasBackgroundJobs().catch(() => false))) out.push(live);
  }
  return out;
}
