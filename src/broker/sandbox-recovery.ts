import type { LiveSandbox, LiveSandboxes } from './live-sandboxes.js';
import type { ResolvedCall } from './resolve-call.js';
import type { Logger } from '../logging/logger.js';

/** A container this close to its pids limit when a shell cannot start counts as out of processes. */
const PIDS_HEADROOM = 8;

/**
 * What a failed call may recover from, once: a sandbox removed or stopped out of band (it is
 * ensured again), a container whose every pid a command took (it is restarted). Tells which it
 * is, and writes the line the call's result carries about it.
 */
export class SandboxRecovery {
  constructor(private readonly opts: { lives: Pick<LiveSandboxes, 'backendOf' | 'forget'>; log: Logger }) {}

  /** After a failed call: whether the engine still has the sandbox's container, and running. */
  async outOfBandState(live: LiveSandbox): Promise<'gone' | 'stopped' | undefined> {
    if (!live.traits.listsByLabel) return undefined;
    const backend = this.opts.lives.backendOf(live);
    try {
      const found = (await backend.listManaged()).find((m) => m.ref === live.sandbox.ref);
      if (found === undefined) return 'gone';
      return found.running ? undefined : 'stopped';
    } catch {
      return undefined; // the engine itself is unreachable: report the original error
    }
  }

  /**
   * The line for a call that found its sandbox stopped (its main process ended: a command ended
   * it, or someone stopped it) and starts it again: what the start took with it.
   */
  startedAgainNotice(call: ResolvedCall, live: LiveSandbox): string {
    const notice = `berth: sandbox "${call.binding.sandboxKey}" had stopped (its main process ended, or it was stopped from outside), ` +
      `so it was started again: every process in it had ended${emptiedDirs(live)}\n`;
    this.opts.log.child('berth:broker').info(notice.trim());
    return notice;
  }

  /** After a shell could not start in a container: its pid count when (nearly) every pid is taken. */
  async outOfProcesses(live: LiveSandbox): Promise<{ current: number; limit: number } | undefined> {
    if (!live.traits.ownsProcessTable) return undefined;
    const count = await live.sandbox.processCount?.();
    return count !== undefined && count.current >= count.limit - PIDS_HEADROOM ? count : undefined;
  }

  /**
   * The last resort when not even the warden could end what took every pid of a container (a
   * bomb that killed the warden, or one an earlier process left): restart it (the next call
   * starts it again). Returns the line that says so.
   */
  async restart(call: ResolvedCall, live: LiveSandbox, full: { current: number; limit: number }): Promise<string> {
    const notice = `berth: no new process could start in sandbox "${call.binding.sandboxKey}" (${full.current} of ${full.limit} pids in use), ` +
      `so it was restarted: every process in it was killed${emptiedDirs(live)}\n`;
    this.opts.log.child('berth:broker').info(notice.trim());
    await this.opts.lives.forget(live);
    await this.opts.lives.backendOf(live).stop(live.sandbox.ref);
    return notice;
  }
}

/** What a restart of `live`'s sandbox empties, for its notice (' and /tmp, … (tmpfs) were emptied', or nothing). */
function emptiedDirs(live: LiveSandbox): string {
  const dirs = live.sandbox.volatileDirs ?? [];
  return dirs.length > 0 ? ` and ${dirs.join(', ')} (tmpfs) were emptied` : '';
}
