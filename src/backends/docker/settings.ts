import * as z from 'zod';
import { absolutePath, bool, isCleanAbsolute, oneOf, positiveInteger, positiveNumber, TENANT_NAME } from '../../config/zod-kit.js';
import { mergeWritten, type SettingsSection } from '../../config/section.js';

/*
 * The `docker:` config section (top level and per profile): what the docker module adds to the
 * config schema. Every key optional; the defaults are here, and a profile's keys replace the top
 * level's (`mergeWritten`).
 */

/** Docker settings. Optional limits stay `undefined` when the user did not set them, so the
 * backend can tell an explicit limit (error if unsupported) from its own default (warning). */
export interface DockerSettings {
  image: string;
  network: 'bridge' | 'none';
  memoryMb: number | undefined;
  cpus: number | undefined;
  pidsLimit: number | undefined;
  shmSizeMb: number | undefined;
  tmpSizeMb: number | undefined;
  /** tmpfs size for ephemeral sandboxes' /workspace and home. */
  ephemeralSizeMb: number | undefined;
  runAsHostUser: boolean;
  /** Operator-provided binds, checked against the credential-surface refusals; each with its audience. */
  volumes: VolumeSettings[];
  /**
   * Bound on the sandbox's own disk use in MiB: its writable layer, plus its persistent dirs under
   * `$BERTH_HOME` (never an attached workspace or a volume). Undefined: the backend's default.
   * The kernel caps each part where the host can (disk-bound.ts); berth's periodic sweep
   * (disk-usage.ts) sums them on every engine; a sandbox over it is stopped and its calls fail
   * with `disk_limit_exceeded`.
   */
  diskMb: number | undefined;
}

/** One `docker.volumes` entry: a host dir bound into the sandboxes of the tenants listed. */
export interface VolumeSettings {
  source: string;
  target: string;
  readOnly: boolean;
  /**
   * Tenants whose sandboxes get this bind; `'*'` is every tenant (the operator's explicit choice).
   * A volume written as a plain string belongs to the CLI's tenant `local` only.
   */
  tenants: readonly string[] | '*';
}

/** A parsed `docker.volumes` entry. */
export interface VolumeSpec {
  host: string;
  container: string;
  readOnly: boolean;
}

/** Parses `/abs/host:/abs/container[:ro]`; undefined when it does not have that shape. */
export function parseVolume(spec: string): VolumeSpec | undefined {
  const parts = spec.split(':');
  if (parts.length !== 2 && parts.length !== 3) return undefined;
  const [host = '', container = '', mode] = parts;
  if (mode !== undefined && mode !== 'ro') return undefined;
  if (!isCleanAbsolute(host) || !isCleanAbsolute(container) || container === '/') return undefined;
  return { host, container, readOnly: mode === 'ro' };
}

const VOLUME_STRING_FORM = 'a volume "/abs/host:/abs/container" or "/abs/host:/abs/container:ro" (absolute paths, no ".." segments, not onto "/")';

/**
 * `docker.volumes` entries: a string binds for the CLI's tenant `local` only; the mapping form names
 * its audience explicitly, so a bind never crosses tenants by default.
 */
const volumeEntry = z.union(
  [
    z.string().refine((s) => parseVolume(s) !== undefined, { error: VOLUME_STRING_FORM }),
    z.strictObject(
      {
        source: absolutePath('the host dir'),
        target: absolutePath('the path inside the sandbox').refine((p) => p !== '/', { error: 'a path inside the sandbox other than "/"' }),
        readOnly: bool(),
        tenants: z.union([
          z.literal('*'),
          z.array(z.string().regex(TENANT_NAME, { error: 'a tenant name' }), { error: 'a list of tenant names, or "*"' }).min(1, { error: 'a list of tenant names, or "*"' }),
        ], { error: 'a list of tenant names, or "*" for every tenant' }),
      },
      { error: 'a mapping {source, target, readOnly?, tenants}' },
    ),
  ],
  { error: `${VOLUME_STRING_FORM}, or a mapping {source, target, readOnly?, tenants: [tenant, ...] | "*"}` },
);

/** `source:target[:ro]`, for messages. */
function describeVolume(v: VolumeSettings): string {
  return `${v.source}:${v.target}${v.readOnly ? ':ro' : ''}`;
}

/** The settings form of one written volume entry (already validated). */
export function volumeSettings(entry: string | { source: string; target: string; readOnly?: boolean | undefined; tenants: readonly string[] | '*' }): VolumeSettings {
  if (typeof entry === 'string') {
    const v = parseVolume(entry)!;
    return { source: v.host, target: v.container, readOnly: v.readOnly, tenants: ['local'] };
  }
  return { source: entry.source, target: entry.target, readOnly: entry.readOnly ?? false, tenants: entry.tenants === '*' ? '*' : [...entry.tenants] };
}

const dockerShape = {
  image: z
    .string({ error: 'a non-empty image reference' })
    .min(1, { error: 'a non-empty image reference' })
    .optional(),
  network: oneOf(['bridge', 'none']),
  memoryMb: positiveInteger(),
  cpus: positiveNumber(),
  pidsLimit: positiveInteger(),
  shmSizeMb: positiveInteger(),
  tmpSizeMb: positiveInteger(),
  ephemeralSizeMb: positiveInteger(),
  runAsHostUser: bool(),
  volumes: z.array(volumeEntry, { error: 'a list of volumes' }).optional(),
  diskMb: positiveInteger(),
};

/** The image sandboxes run when nothing else is configured. */
export const DEFAULT_IMAGE_REF = 'berth-sandbox:latest';

/** The `docker:` section of the config: its keys, defaults and merge. */
export const dockerSettings: SettingsSection<DockerSettings, typeof dockerShape> = {
  shape: dockerShape,
  defaults: () => ({
    image: DEFAULT_IMAGE_REF,
    network: 'bridge',
    memoryMb: undefined,
    cpus: undefined,
    pidsLimit: undefined,
    shmSizeMb: undefined,
    tmpSizeMb: undefined,
    ephemeralSizeMb: undefined,
    runAsHostUser: false,
    volumes: [],
    diskMb: undefined,
  }),
  // A profile's volumes are its whole list, in their settings form.
  merge: (base, written) => mergeWritten(base, written, { volumes: (w) => w.map(volumeSettings) }),
  hostBinds: (s) => s.volumes.map((v) => ({ source: v.source, key: 'volumes', describe: describeVolume(v), readOnly: v.readOnly })),
};
