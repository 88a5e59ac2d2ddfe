import { stat } from 'node:fs/promises';
import type Dockerode from 'dockerode';
import type { SandboxSpec } from '../backend.js';
import { PolicyRefusedError } from '../../errors.js';
import { hostBindsOf, type HostBind } from './container-spec.js';

/** A host dir bound read-write into a sandbox, with its owner as `stat` reports it. */
export interface RwBind {
  /** For messages: `the attached workspace /home/ana/p`, `docker.volumes entry /srv/x:/data`. */
  what: string;
  uid: number;
  gid: number;
}

export interface RunAsInput {
  /** Every read-write host bind of the sandbox that berth does not own itself. */
  binds: readonly RwBind[];
  /**
   * berth's own per-sandbox dirs (`$BERTH_HOME/sandboxes/docker/<name>/{home,workspace}`) when
   * they are bound and berth cannot hand them to another uid (it does not run as root).
   */
  ownDirs?: RwBind | undefined;
  /** The engine remaps container root to an unprivileged host uid (`docker info`: name=userns). */
  userns: boolean;
  /** `docker.runAsHostUser`: the uid:gid berth runs as, when asked for. */
  hostUser?: { uid: number; gid: number } | undefined;
}

/**
 * The uid:gid a sandbox's processes run as, or undefined for the image's root. Pure.
 *
 * Root in a container without user-namespace remapping is root on the host for every file it
 * writes into a host bind: a `chmod 4755` copy of a shell it leaves there gives euid 0 to any
 * host user who runs it. So when a read-write bind belongs to a non-root host user, the sandbox
 * runs as that user: whatever it plants there carries at most that owner's privilege.
 *
 * Root-owned binds keep root inside. That adds no privilege: files root writes into a dir root
 * owns carry root's privilege, which the dir's owner already has; berth's own dirs (when berth
 * runs as root) are 0700 under a 0700 `BERTH_HOME`, so no other host user reaches what is planted
 * there, and an operator's root-owned volume is the operator's explicit choice.
 * With userns remapping container root is an unprivileged host uid, so no switch is needed.
 *
 * @example
 * chooseRunAs({ binds: [{ what: 'the attached workspace /home/ana/p', uid: 1000, gid: 1000 }], userns: false })
 * // → { uid: 1000, gid: 1000 }
 */
export function chooseRunAs(input: RunAsInput): { uid: number; gid: number } | undefined {
  if (input.userns) return input.hostUser;
  const owners: RwBind[] = input.binds.filter((b) => b.uid !== 0);
  if (input.ownDirs !== undefined && input.ownDirs.uid !== 0) owners.push(input.ownDirs);
  if (input.hostUser !== undefined && input.hostUser.uid !== 0) {
    owners.push({ what: 'docker.runAsHostUser (the user berth runs as)', ...input.hostUser });
  }
  const first = owners[0];
  if (first === undefined) return input.hostUser;
  const other = owners.find((o) => o.uid !== first.uid);
  if (other !== undefined) {
    throw new PolicyRefusedError(
      `${first.what} belongs to uid ${first.uid} but ${other.what} belongs to uid ${other.uid}; a sandbox runs as the owner of ` +
        'its read-write host dirs (so nothing it writes there carries more privilege than their owner), and cannot be both: ' +
        'bind dirs of one owner, make one of them read-only, or use separate sandboxes',
    );
  }
  return { uid: first.uid, gid: first.gid };
}

/** The `User` string of a container create for `runAs` ('' is the image's own user, root here). */
export function userOption(runAs: { uid: number; gid: number } | undefined): string {
  return runAs === undefined ? '' : `${runAs.uid}:${runAs.gid}`;
}

/** The user is fixed at create: refuse a container that runs as someone else than its binds now require. */
export function assertRunsAs(spec: SandboxSpec, info: Dockerode.ContainerInspectInfo, runAs: { uid: number; gid: number } | undefined): void {
  const have = info.Config.User ?? '';
  const want = userOption(runAs);
  if (have === want) return;
  throw new PolicyRefusedError(
    `sandbox "${spec.identity.key}" (container ${info.Id.slice(0, 12)}) runs as ${have === '' ? 'root' : have} but its read-write host dirs ` +
      `require ${want === '' ? 'root' : want} (a sandbox runs as the owner of the host dirs it writes); the user is fixed when ` +
      'the sandbox is created: remove it (berth rm with the same scope flags) and it is created again as that user',
  );
}

/**
 * Who a sandbox runs as, from the owners of its read-write host binds (`stat`). berth's own dirs
 * follow the chosen owner when berth can hand them over (it runs as root); otherwise they are
 * berth's (`berthUser`) and count as one more owner.
 */
export async function runAsFor(
  spec: SandboxSpec,
  hostDir: string | undefined,
  userns: boolean,
  berthUser: { uid: number; gid: number } | undefined,
): Promise<{ uid: number; gid: number } | undefined> {
  const binds: RwBind[] = [];
  for (const b of hostBindsOf(spec, hostDir)) {
    if (b.readOnly || b.kind === 'own') continue;
    // A missing source is created by the engine, as root: it constrains nothing.
    const st = await stat(b.source).catch(() => undefined);
    if (st !== undefined) binds.push({ what: describeBind(b), uid: st.uid, gid: st.gid });
  }
  const ownDirs = hostDir !== undefined && berthUser !== undefined && berthUser.uid !== 0
    ? { what: `berth's own sandbox dir ${hostDir}`, ...berthUser } : undefined;
  return chooseRunAs({ binds, ownDirs, userns, hostUser: spec.settings.docker.runAsHostUser ? berthUser : undefined });
}

function describeBind(b: HostBind): string {
  return b.kind === 'workspace' ? `the attached workspace ${b.source}` : `docker.volumes entry ${b.source}:${b.target}`;
}
