import { closeSync, lstatSync, openSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { BerthError } from '../../errors.js';
import type { SandboxDirs } from './layout.js';
import { createSandboxDirs, existingOwner, removeSandboxDirs, rootLayout, sandboxDirs } from './sandbox-dirs.js';
import { sandboxUser } from './sandbox-user.js';
import { claimOwner, claimUid, releaseUid, type UidRange } from './uid-claims.js';

/** Where a sandbox lives on the host and who it runs as. */
export interface SandboxPlacement {
  dirs: SandboxDirs;
  /** Host uid:gid to start bwrap as; undefined: berth's own (berth is not root). */
  user: { uid: number; gid: number } | undefined;
  /** The attached workspace bound at /workspace, if any (its real path). */
  workspace: string | undefined;
}

export interface PlaceOptions {
  /** A prepared root (prepareRoot). */
  root: string;
  /** The sandbox's dir name (scope/naming.ts). */
  name: string;
  range: UidRange;
  /** The attached workspace's real path, when one is mounted. */
  attached?: string | undefined;
  berthUid?: number;
}

/**
 * Finds or makes a sandbox's dirs and its uid. A new sandbox of its own claims a uid of the range;
 * an existing one keeps the uid its dirs belong to (and its claim is checked). A failure leaves no
 * claim and no dir it made.
 */
export function placeSandbox(opts: PlaceOptions): SandboxPlacement {
  const dirs = sandboxDirs(opts.root, opts.name);
  const berthUid = opts.berthUid ?? process.getuid?.() ?? 0;
  let attached: { path: string; uid: number; gid: number } | undefined;
  if (opts.attached !== undefined) {
    const st = lstatSync(opts.attached);
    if (!st.isDirectory()) throw new BerthError('policy_refused', `the attached workspace ${opts.attached} is not a directory`);
    attached = { path: opts.attached, uid: st.uid, gid: st.gid };
  }
  const rule = sandboxUser({ berthUid, attached });
  if (rule.kind === 'berth') {
    createSandboxDirs(dirs, undefined);
    return { dirs, user: undefined, workspace: opts.attached };
  }
  if (rule.kind === 'workspace-owner') {
    const user = { uid: rule.uid, gid: rule.gid };
    createSandboxDirs(dirs, user);
    return { dirs, user, workspace: opts.attached };
  }
  const claims = rootLayout(opts.root).uids;
  const existing = existingOwner(dirs);
  if (existing !== undefined) {
    keepClaim(claims, opts.range, existing.uid, dirs.root);
    const user = { uid: existing.uid, gid: existing.uid };
    createSandboxDirs(dirs, user);
    return { dirs, user, workspace: undefined };
  }
  const uid = claimUid(claims, opts.range, dirs.root);
  try {
    createSandboxDirs(dirs, { uid, gid: uid });
  } catch (err) {
    removeSandboxDirs(opts.root, dirs);
    releaseUid(claims, uid, dirs.root);
    throw err;
  }
  return { dirs, user: { uid, gid: uid }, workspace: undefined };
}

/** An existing sandbox's uid must be in the range and claimed by it (claimed again if the claim was lost). */
function keepClaim(claims: string, range: UidRange, uid: number, owner: string): void {
  if (uid < range.first || uid >= range.first + range.count) {
    throw new BerthError(
      'policy_refused',
      `the sandbox at ${owner} runs as uid ${uid}, outside the configured bwrap uid range ${range.first}..${range.first + range.count - 1}; ` +
        'remove it (berth rm with the same scope flags) or restore the range it was made with',
    );
  }
  const holder = claimOwner(claims, uid);
  if (holder === owner) return;
  if (holder === undefined) {
    try {
      const fd = openSync(join(claims, String(uid)), 'wx', 0o600);
      writeSync(fd, owner);
      closeSync(fd);
      return;
    } catch {
      // Taken between the look and the claim: fall through to the refusal.
    }
  }
  throw new BerthError(
    'internal',
    `uid ${uid} of the sandbox at ${owner} is claimed by ${claimOwner(claims, uid) ?? 'another sandbox'}; two sandboxes never share a uid: ` +
      'remove one of them (berth rm)',
  );
}

/** Removes a stopped sandbox's dirs, then frees its uid. Gone is success. */
export function removeSandbox(root: string, dirs: SandboxDirs): void {
  const owner = existingOwner(dirs);
  removeSandboxDirs(root, dirs);
  if (owner !== undefined) releaseUid(rootLayout(root).uids, owner.uid, dirs.root);
}
