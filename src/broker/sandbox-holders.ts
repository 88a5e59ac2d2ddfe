import { ownerAlive, ownerToken } from './process-owner.js';
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
    const sessionOwners = this.opts.sessions.ofSandbox(digest).filter((s) => s.closedMs === null).map((s) => s.owner);
    return [heldBy, ...this.opts.sandboxes.holders(digest), ...sessionOwners].find((o): o is string => o !== null && o !== this.self && ownerAlive(o));
  }
}

/** The pid in an owner token, for messages. */
export function pidOf(owner: string): string {
  return owner.split(':')[0] ?? owner;
}
