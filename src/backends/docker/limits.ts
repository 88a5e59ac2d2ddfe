import type { DockerSettings } from './settings.js';

/** Defaults for limits the user left unset. A default the engine cannot apply is only a warning. */
export const LIMIT_DEFAULTS = {
  memoryMb: 2048,
  cpus: 2,
  pidsLimit: 512,
  shmSizeMb: 64,
  tmpSizeMb: 256,
  ephemeralSizeMb: 512,
  /**
   * Disk one sandbox may use (writable layer + berth's own dirs of it): each part capped by the
   * kernel where the host can (storage-quota.ts, sandbox-disk.ts), the sum by berth's periodic
   * check (disk-usage.ts). 10 GiB holds a toolchain, a large dependency tree and build output (a Debian
   * sandbox with build-essential, node_modules and a few builds stays well under it), yet stops one
   * runaway sandbox long before it fills a host disk.
   */
  diskMb: 10_240,
} as const;

/** What the engine can enforce, read once from `GET /info`. */
export interface EngineCapabilities {
  memoryLimit: boolean;
  swapLimit: boolean;
  cpuCfsQuota: boolean;
  pidsLimit: boolean;
  cgroupDriver: string;
  cgroupVersion: string;
  /**
   * Container root is an unprivileged host uid: user-namespace remapping (`SecurityOptions` has
   * `name=userns`) or a rootless engine (`name=rootless`).
   */
  userns: boolean;
  /**
   * The storage driver that can cap a container's writable layer (`StorageOpt size`), as
   * `btrfs`, `zfs`, `overlay2 on xfs`...; undefined when it cannot (overlay2 on extfs).
   */
  storageQuota: string | undefined;
}

/** Reads the capability flags of `docker.info()`. Missing flags count as unsupported. */
export function capabilitiesFromInfo(info: Record<string, unknown>): EngineCapabilities {
  const flag = (key: string): boolean => info[key] === true;
  return {
    memoryLimit: flag('MemoryLimit'),
    swapLimit: flag('SwapLimit'),
    cpuCfsQuota: flag('CpuCfsQuota'),
    pidsLimit: flag('PidsLimit'),
    cgroupDriver: typeof info['CgroupDriver'] === 'string' ? info['CgroupDriver'] : 'unknown',
    cgroupVersion: typeof info['CgroupVersion'] === 'string' ? info['CgroupVersion'] : 'unknown',
    userns: Array.isArray(info['SecurityOptions']) && info['SecurityOptions'].some((o) => typeof o === 'string' && /(^|,)name=(userns|rootless)(,|$)/.test(o)),
    storageQuota: storageQuotaOf(info),
  };
}

/** Storage drivers that take a writable layer's size at create (the engine's `--storage-opt size`). */
const QUOTA_DRIVERS = new Set(['btrfs', 'zfs', 'devicemapper', 'windowsfilter']);

/**
 * Whether the engine's storage driver can cap a writable layer, from `GET /info`: btrfs, zfs and
 * devicemapper always; overlay2 only on xfs (mounted with pquota, which the engine alone can tell:
 * a create it refuses is taken back without the cap, see docker-backend.ts).
 */
function storageQuotaOf(info: Record<string, unknown>): string | undefined {
  const driver = typeof info['Driver'] === 'string' ? info['Driver'] : '';
  if (QUOTA_DRIVERS.has(driver)) return driver;
  const status = Array.isArray(info['DriverStatus']) ? info['DriverStatus'] : [];
  const backing = status.find((kv): kv is [string, string] => Array.isArray(kv) && kv[0] === 'Backing Filesystem' && typeof kv[1] === 'string')?.[1];
  return driver === 'overlay2' && backing === 'xfs' ? 'overlay2 on xfs' : undefined;
}

/** The resource part of a container's HostConfig, and what could not be applied. */
export interface LimitPlan {
  hostConfig: { Memory?: number; MemorySwap?: number; NanoCpus?: number; PidsLimit?: number; ShmSize?: number; StorageOpt?: { size: string } };
  /** Explicit settings the engine cannot apply: start-up errors. */
  errors: string[];
  /** Defaults the engine cannot apply: warnings; the sandbox runs without that limit. */
  warnings: string[];
}

const MB = 1024 * 1024;

/**
 * Decide the resource limits for `settings` on an engine with `caps`. Pure.
 *
 * @example
 * planLimits({ ...docker, pidsLimit: 64 }, { ...caps, pidsLimit: false }).errors
 * // → ['docker.pidsLimit is set to 64 but this engine cannot limit pids (cgroup v1, cgroupfs); …']
 */
export function planLimits(settings: DockerSettings, caps: EngineCapabilities): LimitPlan {
  const plan: LimitPlan = { hostConfig: {}, errors: [], warnings: [] };
  const cgroup = `cgroup v${caps.cgroupVersion}, ${caps.cgroupDriver}`;
  const apply = (
    key: 'memoryMb' | 'cpus' | 'pidsLimit',
    supported: boolean,
    what: string,
    set: (value: number) => void,
  ): void => {
    const explicit = settings[key];
    const value = explicit ?? LIMIT_DEFAULTS[key];
    if (supported) {
      set(value);
      return;
    }
    if (explicit !== undefined) {
      plan.errors.push(
        `docker.${key} is set to ${explicit} but this engine cannot limit ${what} (${cgroup}); ` +
          `remove docker.${key} from the config or enable the cgroup controller on the docker host`,
      );
    } else {
      plan.warnings.push(`this engine cannot limit ${what} (${cgroup}); sandboxes run without the default ${key} ${value}`);
    }
  };
  apply('memoryMb', caps.memoryLimit, 'memory', (mb) => {
    plan.hostConfig.Memory = mb * MB;
    // Without swap accounting MemorySwap cannot be set; with it, equal values mean "no swap".
    if (caps.swapLimit) plan.hostConfig.MemorySwap = mb * MB;
  });
  apply('cpus', caps.cpuCfsQuota, 'cpu time', (cpus) => {
    plan.hostConfig.NanoCpus = Math.round(cpus * 1e9);
  });
  apply('pidsLimit', caps.pidsLimit, 'the number of processes', (pids) => {
    plan.hostConfig.PidsLimit = pids;
  });
  // shm is a tmpfs size, not a cgroup limit: every engine applies it.
  plan.hostConfig.ShmSize = (settings.shmSizeMb ?? LIMIT_DEFAULTS.shmSizeMb) * MB;
  // The writable layer stops at the disk bound in the kernel (the periodic check still sums it
  // with berth's own dirs of the sandbox). The engine reads `M` as MiB.
  if (caps.storageQuota !== undefined) plan.hostConfig.StorageOpt = { size: `${settings.diskMb ?? LIMIT_DEFAULTS.diskMb}M` };
  return plan;
}
