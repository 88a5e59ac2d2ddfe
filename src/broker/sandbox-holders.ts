import { ownerAlive, ownerToken } from '../kit/process-owner.js';
import type { SandboxTable } from './state/sandbox-table.js';
import type { SessionTable } from './state/session-table.js';

export interface SandboxHoldersOptions {
  sandboxes: Pick<SandboxTable, 'get' | 'holders'>;
  sessions: Pick<SessionTable, 'ofSandbox'>;
}

/**
 * Which berth processes on this home hold a sandbox, as the store says: those that hold it live
 * (`sandbox_holders`), the one that brought it up last (`held_by`) and those whose open sessions use it. A hibernation, a restore or a snapshot
 * stops or replaces the sandbox, so each leaves alone one that another live process holds: that
 * process may be running a command in it.
 */
export class SandboxHolders {
  private readonly self = ownerToken();

  constructor(private readonly opts: SandboxHoldersOptions) {}

  /** A live process other than this one that holds sandbox `digest` (`pid:starttime`), or undefined. */
  other(digest: string): string | undefined {
    const heldBy = this.opts.sandboxes.get(digest)?.heldBy ?? null;
    return [heldBy, ...this.opts.sandboxes.holders(digest)].find((o): o is string => this.liveOther(o)) ?? this.sessionHolder(digest);
  }

  /**
   * A live process other than this one that holds an open session on sandbox `digest`: a
   * long-lived one (serve, mcp, a library), since a CLI call's sessions have no holder.
   */
  sessionHolder(digest: string): string | undefined {
    return this.opts.sessions.ofSandbox(digest).filter((s) => s.closedMs === null).map((s) => s.owner).find((o): o is string => this.liveOther(o));
  }

  private liveOther(owner: string | null): boolean {
    return owner !== null && owner !== this.self && ownerAlive(owner);
  }
}

/** The pid in an owner token, for messages. */
export function pidOf(owner: string): string {
  return owner.split(':')[0] ?? owner;
}
