import path from 'node:path';
import type { Readable } from 'node:stream';
import type Dockerode from 'dockerode';
import type { VolumeSettings, DockerSettings } from './settings.js';
import { volumesForTenant } from '../../policy/volumes.js';
import { EGRESS_CA_DIR, type SandboxSpec } from '../backend.js';
import { LIMIT_DEFAULTS, type LimitPlan } from './limits.js';
import { BerthError } from '../../errors.js';
import { LABEL } from '../labels.js';
import { HOME, WORKSPACE } from './paths.js';
import { STDIO_DIR, STDIO_LABEL } from './stdio-dir.js';
import { WARDEN_RESIDENT, WARDEN_SCRIPT } from '../../shell/warden-script.js';

export { HOME, STATE_DIR, WORKSPACE } from './paths.js';

export { LABEL } from '../labels.js';

/**
 * Capabilities added back after dropping ALL. Docker's default set also has FSETID, MKNOD,
 * NET_RAW, NET_BIND_SERVICE, SYS_CHROOT, SETPCAP, SETFCAP and AUDIT_WRITE; none is needed to run
 * commands or install packages, so they stay dropped.
 */
const CAP_ADD = [
  // dpkg/tar give unpacked files their owners (root:shadow, _apt, …).
  'CHOWN',
  // root must write files and dirs it does not own or whose mode excludes it (dpkg, apt's
  // partial dir owned by _apt, 0400 files such as /etc/shadow on user creation).
  'DAC_OVERRIDE',
  // chmod/utime on files root does not own (dpkg restoring modes and mtimes after chown).
  'FOWNER',
  // apt drops to the _apt user to download; adduser/su/runuser switch users in postinst scripts.
  'SETUID',
  'SETGID',
  // With SETUID a command may run as another uid (su nobody -c …); root needs KILL to signal it,
  // or a timeout could not end that command's process tree.
  'KILL',
] as const;

/** Bit mask of CAP_ADD as `/proc/<pid>/status` shows it in CapEff (for tests and diagnostics). */
export const CAP_ADD_MASK = 0b1110_1011n; // CHOWN 0, DAC_OVERRIDE 1, FOWNER 3, KILL 5, SETGID 6, SETUID 7

/** Deterministic name of a persistent sandbox's container. */
export function persistentName(digest: string): string {
  return `berth-${digest.slice(0, 24)}`;
}

/** Unique name of one ephemeral container; `random8hex` comes from the caller's id source. */
export function ephemeralName(digest: string, random8hex: string): string {
  return `berth-${digest.slice(0, 16)}-${random8hex}`;
}

/**
 * Set on a container whose main process is berth's warden (see `createOptions`). A container
 * without it (main process `sleep infinity`) gets its warden as an exec.
 */
export const WARDEN_LABEL = 'berth.warden';

/** The main process of a sandbox container: the warden, reading operations on its stdin. */
const RESIDENT_WARDEN_CMD: readonly string[] = ['bash', '--noprofile', '--norc', '-c', `${WARDEN_SCRIPT}${WARDEN_RESIDENT}`, 'berth-warden'];

/** The archive a new sandbox unpacks at `/` as it starts (`CreatePlanInput.fill`), by this name in its stdio dir. */
export const FILL_ARCHIVE = 'fill.tar';

/** What the main process prints, on its own line, when the fill archive could not be unpacked (then it exits). */
export const FILL_FAILED = 'fill-failed';

/**
 * Before the main process becomes the warden: `tar -x` of the fill archive at `/`, as the
 * sandbox's user, with its limits and in its memory (tmpfs pages count against the process that
 * writes them). Only while the archive is there: berth removes it once the warden answered, so a
 * later start of the same container unpacks nothing. A failure is one line (tar's status and
 * words, at most 400 characters: 1,600 bytes in UTF-8) and an exit: no warden line ever follows it.
 */
const FILL_PREFIX = `
__f=${STDIO_DIR}/${FILL_ARCHIVE}
if [[ -f $__f ]]; then
  __e=$(tar -x -o -f "$__f" -C / 2>&1) || {
    __s=$? __e=\${__e//[$'\\n\\r']/ }
    builtin printf '${FILL_FAILED} tar exited %s: %s\\n' "$__s" "\${__e:0:400}"
    exit 71
  }
fi
unset __f __e
`;

function labelsFor(spec: SandboxSpec<DockerSettings>): Record<string, string> {
  return {
    [LABEL.managed]: 'true',
    [LABEL.installation]: spec.identity.installation,
    [LABEL.identity]: spec.digest,
    [LABEL.key]: spec.identity.key,
    [LABEL.tenant]: spec.identity.tenant,
    [LABEL.profile]: spec.identity.profile ?? '',
    [LABEL.scope]: spec.rule,
    [LABEL.lifecycle]: spec.ephemeral ? 'ephemeral' : 'persistent',
  };
}

/** Host root of a persistent sandbox's binds: `$berthHome/sandboxes/docker/<dirName>`. */
export function hostDirFor(berthHome: string, spec: SandboxSpec<DockerSettings>): string {
  return path.join(sandboxesRoot(berthHome), spec.dirName);
}

export function sandboxesRoot(berthHome: string): string {
  return path.join(path.resolve(berthHome), 'sandboxes', 'docker');
}

interface ParsedVolume {
  source: string;
  target: string;
  readOnly: boolean;
}

/** A `docker.volumes` entry with its target in one normal form (`/workspace/` targets /workspace too). */
export function parseVolume(volume: VolumeSettings): ParsedVolume {
  const target = path.posix.normalize(volume.target).replace(/(.)\/+$/, '$1');
  return { source: volume.source, target, readOnly: volume.readOnly };
}

/** The operator's volumes this sandbox gets: those whose audience includes its tenant. */
export function volumesOf(spec: SandboxSpec<DockerSettings>): ParsedVolume[] {
  return volumesForTenant(spec.section.volumes, spec.identity.tenant).map(parseVolume);
}

/**
 * The host dir that must be bound at /workspace, or undefined for a tmpfs workspace.
 * A volume of this tenant targeting /workspace wins over the session mount and the automatic dir.
 */
export function expectedWorkspaceSource(spec: SandboxSpec<DockerSettings>, hostDir: string | undefined): string | undefined {
  const volume = volumesOf(spec).find((v) => v.target === WORKSPACE);
  if (volume) return path.resolve(volume.source);
  if (spec.mount !== null) return path.resolve(spec.mount);
  return hostDir === undefined ? undefined : path.join(hostDir, 'workspace');
}

/** One host dir bound into a sandbox. `own`: berth's per-sandbox dir under `$BERTH_HOME`. */
export interface HostBind {
  source: string;
  target: string;
  readOnly: boolean;
  kind: 'own' | 'workspace' | 'volume';
}

/**
 * The host dirs a sandbox binds, in bind order: berth's own home dir (persistent), then
 * /workspace (a volume of this tenant, else the attached workspace, else berth's own dir), then
 * the tenant's volumes. Pure.
 */
export function hostBindsOf(spec: SandboxSpec<DockerSettings>, hostDir: string | undefined): HostBind[] {
  const binds: HostBind[] = [];
  const volumes = volumesOf(spec);
  if (hostDir !== undefined) binds.push({ source: path.join(hostDir, 'home'), target: HOME, readOnly: false, kind: 'own' });
  if (!volumes.some((v) => v.target === WORKSPACE)) {
    if (spec.mount !== null) binds.push({ source: path.resolve(spec.mount), target: WORKSPACE, readOnly: false, kind: 'workspace' });
    else if (hostDir !== undefined) binds.push({ source: path.join(hostDir, 'workspace'), target: WORKSPACE, readOnly: false, kind: 'own' });
  }
  for (const v of volumes) binds.push({ source: path.resolve(v.source), target: v.target, readOnly: v.readOnly, kind: 'volume' });
  return binds;
}

export interface CreatePlanInput {
  spec: SandboxSpec<DockerSettings>;
  name: string;
  image: string;
  /** Persistent sandboxes: the bind root; ephemeral: undefined (tmpfs). */
  hostDir: string | undefined;
  limits: LimitPlan;
  /** The uid:gid the sandbox runs as (see run-as.ts); undefined: the image's root. */
  runAs: { uid: number; gid: number } | undefined;
  /** `none`, or the id of the berth network the sandbox joins (see network-shards.ts). */
  networkMode: string;
  /** Labels instead of the identity's (a warm-pool container has no identity yet). */
  labels?: Record<string, string> | undefined;
  /** Host dir of the egress proxy's CA files, bound read-only at EGRESS_CA_DIR. */
  egressCaDir?: string | undefined;
  /** The container's own stdio dir (stdio-dir.ts), bound read-only at STDIO_DIR and named by STDIO_LABEL. */
  stdio?: { id: string; dir: string } | undefined;
  /** Its stdio dir holds FILL_ARCHIVE, which the main process unpacks at `/` before it becomes the warden. */
  fill?: boolean | undefined;
}

/** What a container's start is given besides its plan (both for a sandbox made from a snapshot). */
export type StartPlan = Omit<CreatePlanInput, 'networkMode' | 'fill'> & {
  /** Makes an archive to unpack in it as it starts (a fork's tmpfs dirs); called once, by the start. */
  fill?: (() => Readable) | undefined;
  /** A check that must pass before it starts (the snapshot's), made while the engine creates it: its failure is the error told. */
  ready?: Promise<unknown> | undefined;
};

/**
 * The full `POST /containers/create` body for a sandbox. Pure.
 * Hardening: caps dropped to CAP_ADD, no-new-privileges, an init as PID 1, pids/memory/cpu
 * limits, size-limited tmpfs for /tmp, a berth network (or none) and optionally a non-root user.
 *
 * The main process is the sandbox's warden (warden-script.ts): started with the container, it is
 * there before any command could take every pid, and berth reaches it by attaching to its stdin
 * rather than by an exec. An exec costs the engine a process start and 7 open files for as long
 * as it runs (3 FIFOs opened twice, a socket); the attach costs 3 (the stdin FIFO, a socket). The
 * engine's open files bound how many sandboxes one dockerd holds (~21 each before this).
 * Its output is nobody's record, so no log driver keeps it (one file fewer per container).
 */
export function createOptions(input: CreatePlanInput): Dockerode.ContainerCreateOptions {
  const { spec, hostDir, runAs } = input;
  const docker = spec.section;
  if (input.fill === true && input.stdio === undefined) throw new BerthError('internal', 'a sandbox filled as it starts needs its stdio dir, where the archive is');
  // tmpfs defaults to noexec in docker; builds, test runners and installers execute from /tmp
  // and the workspace, so exec stays on while nosuid/nodev keep setuid binaries and devices out.
  const owner = runAs ? `,uid=${runAs.uid},gid=${runAs.gid}` : '';
  const tmpfs: Record<string, string> = {
    '/tmp': `rw,exec,nosuid,nodev,size=${docker.tmpSizeMb ?? LIMIT_DEFAULTS.tmpSizeMb}m,mode=1777`,
  };
  const ephemeralSize = `${docker.ephemeralSizeMb ?? LIMIT_DEFAULTS.ephemeralSizeMb}m`;
  const hostBinds = hostBindsOf(spec, hostDir);
  const bound = (target: string): boolean => hostBinds.some((b) => b.target === target);
  if (!bound(HOME)) tmpfs[HOME] = `rw,exec,nosuid,nodev,size=${ephemeralSize},mode=0700${owner}`;
  if (!bound(WORKSPACE)) tmpfs[WORKSPACE] = `rw,exec,nosuid,nodev,size=${ephemeralSize},mode=0755${owner}`;
  const binds = hostBinds.map((b) => `${b.source}:${b.target}${b.readOnly ? ':ro' : ''}`);
  if (input.egressCaDir !== undefined) binds.push(`${input.egressCaDir}:${EGRESS_CA_DIR}:ro`);
  if (input.stdio !== undefined) binds.push(`${input.stdio.dir}:${STDIO_DIR}:ro`);

  return {
    name: input.name,
    Image: input.image,
    // Commands run through exec; the main process keeps the container alive and ends process
    // trees when berth asks (it runs as the sandbox's user, as the commands do).
    Cmd: input.fill === true ? ['bash', '--noprofile', '--norc', '-c', `${FILL_PREFIX}${WARDEN_SCRIPT}${WARDEN_RESIDENT}`, 'berth-warden'] : [...RESIDENT_WARDEN_CMD],
    Entrypoint: [],
    Labels: { ...(input.labels ?? labelsFor(spec)), [WARDEN_LABEL]: 'resident', ...(input.stdio === undefined ? {} : { [STDIO_LABEL]: input.stdio.id }) },
    Env: [`HOME=${HOME}`],
    WorkingDir: WORKSPACE,
    User: runAs ? `${runAs.uid}:${runAs.gid}` : undefined,
    Tty: false,
    // stdin stays open for the life of the container, whoever attaches or lets go.
    OpenStdin: true,
    StdinOnce: false,
    AttachStdin: false,
    AttachStdout: false,
    AttachStderr: false,
    NetworkDisabled: input.networkMode === 'none' ? true : undefined,
    HostConfig: {
      Binds: binds,
      Tmpfs: tmpfs,
      NetworkMode: input.networkMode,
      CapDrop: ['ALL'],
      CapAdd: [...CAP_ADD],
      SecurityOpt: ['no-new-privileges:true'],
      Init: true,
      LogConfig: { Type: 'none', Config: {} },
      ...input.limits.hostConfig,
      RestartPolicy: { Name: 'no', MaximumRetryCount: 0 },
      AutoRemove: false,
    },
  };
}
