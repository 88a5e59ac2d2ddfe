import { setTimeout as sleep } from 'node:timers/promises';
import { BerthError } from '../errors.js';
import type { Logger } from '../logging/logger.js';
import type { CallScopeInput } from '../scope/call-scope.js';
import type { CallResolver } from './call-resolver.js';
import type { ProcessGroups } from '../shell/transport.js';
import type { LiveSandbox, LiveSandboxes } from './live-sandboxes.js';
import type { SandboxHolders } from './sandbox-holders.js';
import type { BackendByName } from './sandbox-removal.js';
import type { SessionGate } from './session-gate.js';
import type { SandboxTable } from './state/sandbox-table.js';
import type { PassedListener } from './sandbox-egress.js';

/** How often a kept sandbox is looked at: a job still running there, the sandbox still there. */
const LOOK_EVERY_MS = 2_000;

/** Looks in a row that could not read the sandbox's processes before a kept sandbox is let go (about a minute). */
const UNREADABLE_LOOKS = 30;

const UNREADABLE = 'its processes cannot be read from this host (its engine runs elsewhere), so no job can be told from none; not kept';

/** A sandbox held here, with the groups whose processes tell whether a job still runs in it. */
interface Held {
  k: KeptSandbox;
  live: LiveSandbox;
  groups: ProcessGroups & { commandsRunning(): boolean };
}

/**
 * A sandbox a closing berth process leaves with a background job while it served the sandbox's
 * egress proxy: what another process needs to serve it alike.
 */
export interface KeptSandbox {
  /** The scope of the call whose egress context the proxy served (normalised; never a token). */
  scope: CallScopeInput;
  /** Its identity digest: the scope must still resolve to it. */
  digest: string;
  /** Its key, for messages. */
  key: string;
  /** Its listening socket, passed to the keeper at its start (absent: the keeper listens anew once the ending process lets go). */
  listener?: PassedListener;
}

/**
 * Starts a process that keeps the egress proxies of `sandboxes` (`berth __keep`) and waits until
 * it holds them: its pid and the keys of those it holds (or found with no job left to keep);
 * rejects naming why none could start.
 * Given by the CLI, whose config, environment and cwd the process must share to serve the same
 * egress context.
 */
export type KeeperStart = (sandboxes: KeptSandbox[]) => Promise<StartedKeeper>;

/** A keeper that got ready: its pid, the keys it holds (or found with no job left), and those whose passed socket it serves. */
export interface StartedKeeper {
  pid: number;
  held: string[];
  serving?: string[];
}

export interface EgressKeeperOptions {
  resolver: Pick<CallResolver, 'resolve'>;
  sandboxes: Pick<SandboxTable, 'get'>;
  /** A long-lived process holding a session on a sandbox takes its listener over. */
  holders: Pick<SandboxHolders, 'sessionHolder'>;
  backends: BackendByName;
  gate: Pick<SessionGate, 'run' | 'acquire'>;
  lives: Pick<LiveSandboxes, 'get' | 'forget'>;
  /** `serves`: the listener is this process's, or it waits to take it over. */
  egress: {
    detach(ref: string): Promise<void>; serves(ref: string): boolean;
    inherit(passed: PassedListener): void; closeInherited(): void; servesPassed(ref: string): boolean;
  };
  /** Aborted when the broker closes: keeping ends. */
  shutdown: AbortSignal;
  log: Logger;
}

/**
 * Keeps sandboxes a berth process left with a background job (docs/design.md, egress): each is held
 * in this process, so its egress proxy listens here (taken over from the process that ended) and no
 * other process hibernates it, as long as a process a command started still runs in one of berth's
 * groups there (read from the kernel's files, not from the job's word). Then it is let go as it is,
 * never stopped or removed. A sandbox gone, hibernated or resolving elsewhere is not kept.
 */
export class EgressKeeper {
  constructor(private readonly o: EgressKeeperOptions) {}

  /**
   * Holds each sandbox of `kept` that is still there, calls `ready` with the keys of those it holds
   * and of those whose passed socket it serves already (the listener of each other one is this
   * process's as soon as the one that ended lets go of it), and resolves once none needs keeping
   * any more (or the broker closes).
   */
  async keep(kept: readonly KeptSandbox[], ready: (heldKeys: string[], servingKeys: string[]) => void = () => undefined): Promise<void> {
    // A passed socket is served as its sandbox is held (its bring-up attaches the egress proxy); the
    // rest close before "ready", or as soon as this process starts ending (a socket no one accepts
    // on would leave the job's connections hanging instead of refused).
    for (const k of kept) if (k.listener !== undefined) this.o.egress.inherit(k.listener);
    const closeInherited = (): void => this.o.egress.closeInherited();
    this.o.shutdown.addEventListener('abort', closeInherited, { once: true });
    let held: Array<Held | 'done' | undefined>;
    try {
      held = await Promise.all(kept.map((k) => this.hold(k).catch((err: unknown) => {
        this.o.log.child('berth:keeper').warn(`sandbox ${k.key}: not kept: ${err instanceof BerthError ? err.message : String(err)}`);
        return undefined;
      })));
    } finally {
      this.o.shutdown.removeEventListener('abort', closeInherited);
      closeInherited();
    }
    // Told as held: those held here, and those no job needs keeping for any more.
    const serving = kept.filter((k, i) => typeof held[i] === 'object' && k.listener !== undefined && this.o.egress.servesPassed(k.listener.ref));
    ready(kept.filter((_k, i) => held[i] !== undefined).map((k) => k.key), serving.map((k) => k.key));
    await Promise.all(held.map((h) => (h === undefined || h === 'done' ? undefined : this.watch(h))));
  }

  /**
   * Brings `k`'s sandbox up in this process (its egress proxy with it); `done` when nothing runs
   * there to keep (it went, or its job ended); undefined when it cannot be kept (logged).
   */
  private async hold(k: KeptSandbox): Promise<Held | 'done' | undefined> {
    const { resolver, sandboxes, gate } = this.o;
    const log = this.o.log.child('berth:keeper');
    const call = resolver.resolve(k.scope, { withCwd: false });
    if (call.spec.digest !== k.digest) {
      log.warn(`sandbox ${k.key}: its scope resolves to another sandbox (${call.binding.sandboxKey}) in this process; not kept`);
      return undefined;
    }
    const rec = sandboxes.get(k.digest);
    // Gone (closed, removed) or hibernated before this process started: nothing runs there to keep.
    if (rec === undefined || rec.ref === '' || (rec.hibernatedMs ?? null) !== null) {
      log.info(`sandbox ${k.key}: gone or hibernated before this process started; nothing to keep`);
      return 'done';
    }
    // Only a running sandbox with a job in it is brought up here: the pool's bring-up would create
    // a missing one or start a stopped one (left: one removed in the moment between this look and it).
    const running = await (await this.o.backends.get(rec.backend)).commandsRunning?.(rec.ref);
    if (running === false) {
      log.info(`sandbox ${k.key}: no job runs in it any more (or it is gone or stopped); nothing to keep`);
      return 'done';
    }
    if (running === undefined) {
      log.warn(`sandbox ${k.key}: ${UNREADABLE}`);
      return undefined;
    }
    try {
      const live = await gate.run(call, (sc) => gate.acquire(call, sc));
      const groups = live.sandbox.processGroups;
      if (!live.recreatedUnreported && groups?.commandsRunning !== undefined) return { k, live, groups: groups as Held['groups'] };
      if (!live.recreatedUnreported) log.warn(`sandbox ${k.key}: ${UNREADABLE}`);
      await this.letGo(k, live);
    } catch (err) {
      log.warn(`sandbox ${k.key}: could not be kept: ${err instanceof BerthError ? err.message : String(err)}`);
    }
    return undefined;
  }

  /**
   * Looks at a held sandbox until no process a command started runs there, it went, a long-lived
   * berth process (serve, mcp, a library) holds a session on it (it takes the listener over, and
   * its live shells would otherwise count as commands here forever), or this process's listener
   * failed; then lets it go.
   */
  private async watch({ k, live, groups }: Held): Promise<void> {
    const { sandboxes, lives, egress, holders, shutdown } = this.o;
    const log = this.o.log.child('berth:keeper');
    const ref = live.sandbox.ref;
    let unreadable = 0;
    let why = 'no job runs in it any more';
    try {
      log.info(`sandbox ${k.key}: keeping its egress proxy while a job started in it runs`);
      while (!shutdown.aborted) {
        await sleep(LOOK_EVERY_MS, undefined, { signal: shutdown }).catch(() => undefined);
        const now = sandboxes.get(k.digest);
        if (shutdown.aborted || lives.get(k.digest) !== live || now === undefined || now.ref !== ref) {
          why = shutdown.aborted ? 'this process is ending' : 'it went';
          break;
        }
        if (!egress.serves(ref)) {
          why = 'its egress listener could not be taken over (see above)';
          break;
        }
        if (holders.sessionHolder(k.digest) !== undefined) {
          why = 'a long-lived berth process holds a session on it and takes its egress proxy over';
          break;
        }
        try {
          if (!groups.commandsRunning()) break;
          unreadable = 0;
        } catch (err) {
          if (++unreadable < UNREADABLE_LOOKS) continue;
          why = `its processes could not be read for a minute (${String(err)})`;
          break;
        }
      }
      log.info(`sandbox ${k.key}: ${why}; let go`);
    } finally {
      await this.letGo(k, live);
    }
  }

  /** Lets go of a sandbox as it is: its listener here closes, this process's hold on it ends. */
  private async letGo(k: KeptSandbox, live: LiveSandbox): Promise<void> {
    await this.o.egress.detach(live.sandbox.ref).catch((err: unknown) => this.o.log.child('berth:keeper').warn(`sandbox ${k.key}: egress listener at let-go: ${String(err)}`));
    await this.o.lives.forget(live);
  }
}
