import { PolicyRefusedError } from '../../errors.js';

/** Who a sandbox runs as on the host. */
export type SandboxUser =
  /** berth is not root: it can only start bwrap as itself. */
  | { kind: 'berth' }
  /** The owner of the attached workspace, so what the sandbox writes there is theirs. */
  | { kind: 'workspace-owner'; uid: number; gid: number }
  /** A uid of its own from the configured range (see uid-claims.ts). */
  | { kind: 'own-uid' };

/**
 * The rule, pure. Never root: bwrap started by root keeps every capability inside and maps the
 * sandbox to host uid 0 whatever `--uid` says, so a root-owned attached workspace is refused
 * instead of being handed to root. A non-root owner of the attached workspace runs the sandbox
 * (the docker backend's rule, see docker/run-as.ts): files it plants there carry at most that
 * owner's privilege, and the owner can use them.
 *
 * @example
 * sandboxUser({ berthUid: 0, attached: { path: '/home/ana/p', uid: 1000, gid: 1000 } })
 * // → { kind: 'workspace-owner', uid: 1000, gid: 1000 }
 */
export function sandboxUser(input: { berthUid: number; attached?: { path: string; uid: number; gid: number } | undefined }): SandboxUser {
  if (input.berthUid !== 0) {
    const a = input.attached;
    if (a !== undefined && a.uid !== input.berthUid) {
      throw new PolicyRefusedError(
        `the attached workspace ${a.path} belongs to uid ${a.uid}, but berth runs as uid ${input.berthUid} and can start a bwrap ` +
          'sandbox only as itself; attach a dir of your own, or run berth as root so the sandbox can run as the dir\'s owner',
      );
    }
    return { kind: 'berth' };
  }
  if (input.attached === undefined) return { kind: 'own-uid' };
  if (input.attached.uid === 0) {
    throw new PolicyRefusedError(
      `the attached workspace ${input.attached.path} belongs to root; a bwrap sandbox never runs as root on the host, and runs as the ` +
        'owner of the dir it writes: chown the dir to an unprivileged user, or attach another dir',
    );
  }
  return { kind: 'workspace-owner', uid: input.attached.uid, gid: input.attached.gid };
}
