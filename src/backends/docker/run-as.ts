import { stat } from 'node:fs/promises';
import type Dockerode from 'dockerode';
import type { SandboxSpec } from '../backend.js';
import { PolicyRefusedError } from '../../errors.js';
import { hostBindsOf, type HostBind } from './container-spec.js';
import type { DockerSettings } from './settings.js';

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
 * host user who runs it. So a sandbox never writes to a host dir as uid 0:
 * - a read-write bind of a non-root owner: the sandbox runs as that owner, so whatever it plants
 *   there carries at most that owner's privilege;
 * - a read-write bind owned by root (an attached workspace or a volume): refused, naming the fix
 *   (hand the dir to an unprivileged owner, or bind it read-only). A sweep of set-id bits after
 *   the fact would race the host user who runs the file first;
 * - berth's own dirs when berth runs as root stay root's: they live under `$BERTH_HOME/sandboxes`,
 *   which berth keeps 0700 (broker/berth-home.ts), so no other host user can reach, let alone
 *   run, anything planted there; it is the same as the container's own writable layer.
 * With userns remapping container root is an unprivileged host uid, so no switch is needed.
 *
 * @example
 * chooseRunAs({ binds: [{ what: 'the attached workspace /home/ana/p', uid: 1000, gid: 1000 }], userns: false })
 * // → { uid: 1000, gid: 1000 }
 */
export function chooseRunAs(input: RunAsInput): { uid: number; gid: number } | undefined {
  if (input.userns) return input.hostUser;
  const rootOwned = input.binds.find((b) => b.uid === 0);
  if (rootOwned !== undefined) throw rootOwnedBindRefusal(rootOwned.what);
  const owners: RwBind[] = [...input.binds];
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

/**
 * Why a read-write host dir owned by root is never bound: the sandbox would write there as root.
 * `what` names the dir as `RwBind.what` does.
 */
function rootOwnedBindRefusal(what: string): PolicyRefusedError {
  return new PolicyRefusedError(
    `${what} is owned by root and would be bound read-write: a sandbox writing there as root could leave a set-uid-root ` +
      'program that any user of this host can run; hand the dir to an unprivileged owner (chown -R <uid>:<gid> DIR: the sandbox ' +
      'then runs as that uid), or bind it read-only',
  );
}

/** The `User` string of a container create for `runAs` ('' is the image's own user, root here). */
export function userOption(runAs: { uid: number; gid: number } | undefined): string {
  return runAs === undefined ? '' : `${runAs.uid}:${runAs.gid}`;
}

/** The user is fixed at create: refuse a container that runs as someone else than its binds now require. */
export function assertRunsAs(spec: SandboxSpec<DockerSettings>, info: Dockerode.ContainerInspectInfo, runAs: { uid: number; gid: number } | undefined): void {
  // Root written out (a snapshot's image says `USER 0:0`) is root, as an unset user is.
  const said = info.Config.User ?? '';
  const have = ['0', '0:0', 'root', 'root:root'].includes(said) ? '' : said;
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
  spec: SandboxSpec<DockerSettings>,
  hostDir: string | undefined,
  userns: boolean,
  berthUser: { uid: number; gid: number } | undefined,
): Promise<{ uid: number; gid: number } | undefined> {
  const binds: RwBind[] = [];
  for (const b of hostBindsOf(spec, hostDir)) {
    if (b.readOnly || b.kind === 'own') continue;
    // The engine would create a missing source as root: that is a root-owned bind too.
    const st = await stat(b.source).catch(() => undefined);
    binds.push({ what: describeBind(b), uid: st?.uid ?? 0, gid: st?.gid ?? 0 });
  }
  const ownDirs = hostDir !== undefined && berthUser !== undefined && berthUser.uid !== 0
    ? { what: `berth's own sandbox dir ${hostDir}`, ...berthUser } : undefined;
  return chooseRunAs({ binds, ownDirs, userns, hostUser: spec.section.runAsHostUser ? berthUser : undefined });
}

function describeBind(b: HostBind): string {
  return b.kind === 'workspace' ? `the attached workspace ${b.source}` : `docker.volumes entry ${b.source}:${b.target}`;
}
