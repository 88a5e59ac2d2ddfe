import { BerthError } from '../errors.js';
import type { Logger } from '../logging/logger.js';
import type { KeeperStart, KeptSandbox, StartedKeeper } from './egress-keeper.js';
import type { LiveSandbox } from './live-sandboxes.js';
import type { ResolvedCall } from './resolve-call.js';
import type { PassedListener } from './sandbox-egress.js';

/** What the close asks of the parts, in the order it goes (see `closeParts`). */
export interface ClosingParts {
  reapers: { stop(): Promise<void> };
  lives: { drained(): Promise<void>; closeAll(): Promise<void>; all(): LiveSandbox[] };
  closer: { closeHeld(): Promise<void> };
  warm: { close(): Promise<void> };
  removal: { releaseUnusedAtClose(): Promise<void> };
  backends: { closeAll(): Promise<void> };
  egress: {
    close(): Promise<void>; holds(ref: string): boolean; heldCall(ref: string): ResolvedCall | undefined;
    listenerFor(ref: string): PassedListener | undefined; stopAccepting(ref: string): void;
  };
  store: { close(): void };
  /** Starts a process that keeps the egress proxies a background job still needs (the CLI's); absent: none is started. */
  keeper: KeeperStart | undefined;
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
 * go; the engines and the store are let go. A step that fails does not stop the ones after it (a
 * session that would not close still leaves the shells to close, the engines and the store to be
 * let go, the store's queued rows to be written): it is said on the log, and the close rejects with
 * the first such failure once every step has run.
 */
export async function closeParts(parts: ClosingParts, graceMs: number): Promise<void> {
  const failures: unknown[] = [];
  const step = async (what: string, run: () => Promise<void> | void): Promise<void> => {
    try {
      await run();
    } catch (err) {
      failures.push(err);
      parts.log.child('berth:broker').warn(`close: ${what} failed (the close goes on): ${err instanceof Error ? err.message : String(err)}`);
    }
  };
  await step('stopping the reapers', () => parts.reapers.stop());
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([parts.lives.drained(), new Promise<void>((resolve) => (timer = setTimeout(resolve, graceMs)))]);
  clearTimeout(timer);
  // Seen before the sessions close (their shells know their jobs); said of those that stay.
  const stranded = await jobsLosingEgress(parts);
  await step('closing the sessions this process holds', () => parts.closer.closeHeld());
  await parts.warm.close().catch((e: unknown) => parts.log.child('berth:pool').warn(`warm pools at close: ${String(e)}`));
  await step('handing jobs to a keeper', () => handOff(parts, stranded.filter((l) => parts.lives.all().includes(l))));
  await step('closing the shells', () => parts.lives.closeAll());
  await step('releasing unused engine objects', () => parts.removal.releaseUnusedAtClose());
  await parts.egress.close().catch((e: unknown) => parts.log.child('berth:egress').warn(`egress at close: ${String(e)}`));
  await step('letting the engines go', () => parts.backends.closeAll());
  await step('closing the store', () => parts.store.close());
  if (failures.length > 0) throw failures[0];
}

/**
 * The live sandboxes whose egress proxy this process serves, whose processes outlive it (a
 * container's; bwrap's end with it) and where a background job runs: one their shells reported
 * after their last command, or a process a command left outside the job table, read from the
 * sandbox's command groups on this host (kernel files: a close never waits on an engine for it).
 * Such a job would lose its network when the process ends (the proxy listens in them from here),
 * so they go to a keeper, or the close says so on the log (a CLI call's stderr).
 */
async function jobsLosingEgress(parts: ClosingParts): Promise<LiveSandbox[]> {
  const out: LiveSandbox[] = [];
  for (const live of parts.lives.all()) {
    if (live.traits.runsWithoutBerth !== true || !parts.egress.holds(live.sandbox.ref)) continue;
    if (await live.shells.hasBackgroundJobs().catch(() => false)) out.push(live);
  }
  return out;
}

/**
 * Hands the sandboxes a background job still runs in (whose proxy this process serves) to a
 * keeper process (`berth __keep`), which holds them and their proxies until no job is left there.
 * Each listening socket is passed to the keeper at its start; once the keeper is ready it serves
 * that same socket, and this process stops accepting on it: the port never closes (connections
 * open through this process end with it). Where no socket could be passed, the keeper listens
 * anew once this process lets go (a moment without a proxy). Without a keeper, or when none could
 * start, says on the log that such a job is left without network.
 */
async function handOff(parts: ClosingParts, stranded: LiveSandbox[]): Promise<void> {
  if (stranded.length === 0) return;
  const kept: KeptSandbox[] = [];
  for (const live of stranded) {
    const call = parts.egress.heldCall(live.sandbox.ref);
    if (call === undefined) continue;
    const { token: _token, ...scope } = call.scope;
    const listener = parts.egress.listenerFor(live.sandbox.ref);
    parts.log.child('berth:egress').debug(`sandbox ${live.record.key}: ${listener === undefined ? 'no egress listener to pass to the keeper' : `passing its egress listener to the keeper`}`);
    kept.push({ scope, digest: live.digest, key: live.record.key, ...(listener === undefined ? {} : { listener }) });
  }
  let keeper: StartedKeeper | undefined;
  let why = '';
  try {
    keeper = kept.length > 0 && parts.keeper !== undefined ? await parts.keeper(kept) : undefined;
  } catch (err) {
    why = ` (no keeper process could start: ${err instanceof Error ? err.message : String(err)})`;
  }
  for (const live of stranded) {
    if (keeper?.held.includes(live.record.key) === true) {
      // Only where the keeper serves the socket itself: elsewhere this process serves until its end, and the keeper listens anew after.
      if (keeper.serving?.includes(live.record.key) === true) parts.egress.stopAccepting(live.sandbox.ref);
      parts.log.child('berth:egress').info(`sandbox ${live.record.key}: a background job started in it may still run; berth process ${keeper.pid} keeps its egress proxy until no job is left there`);
      continue;
    }
    if (keeper !== undefined) why = ` (the keeper process ${keeper.pid} could not hold it; its log is keeper.log in the berth home)`;
    parts.log.child('berth:egress').warn(
      `sandbox ${live.record.key}: a background job started in it may still run, and its egress proxy lived in this berth process, ` +
        `which ends now${why}: such a job has no network from here on, unless a berth serve or berth mcp of this home has used the sandbox (it ` +
        'takes the proxy over within a second). Start jobs that need the network through berth serve',
    );
  }
}
