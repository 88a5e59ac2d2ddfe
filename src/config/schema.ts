import { dirname, isAbsolute, resolve } from 'node:path';
import * as z from 'zod';
import { ConfigError } from '../errors.js';
import {
  BACKENDS,
  SCOPE_MODES,
  isContainerBackend,
  type AuditSettings,
  type BerthConfig,
  type ProfileSettings,
  type ServerSettings,
  type TenantLimits,
  type VolumeSettings,
} from './types.js';

/*
 * One strict schema for berth's config file (DESIGN sections 2, 3, 7).
 *
 * The zod schema describes only what the user may write: every key optional, no defaults, so
 * the cross-field rules below can tell a written value from a default (a default is never an
 * error). Defaults and profile merging happen after validation, in plain code.
 */

const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;
const ENV_PREFIX_GLOB = /^[A-Za-z_][A-Za-z0-9_]*\*$/;
const PER_USER_PREFIX = /^[A-Z][A-Z0-9_]*$/;
const PROFILE_NAME = /^[A-Za-z0-9._-]{1,64}$/;
/** Tenant names as call scopes have them (scope/normalize.ts). */
const TENANT_NAME = /^[A-Za-z0-9._-]{1,64}$/;

/** Issues whose message is already a whole sentence (not an "expected ..." phrase). */
const FULL = { full: true } as const;

function quoteList(values: readonly string[]): string {
  return values.map((v) => `"${v}"`).join(', ');
}

function integer(min: number, max?: number) {
  const expected =
    max === undefined ? `an integer of at least ${min}` : `an integer between ${min} and ${max}`;
  const base = z.number({ error: expected }).int({ error: expected }).min(min, { error: expected });
  return (max === undefined ? base : base.max(max, { error: expected })).optional();
}

const positiveInteger = () =>
  z
    .number({ error: 'a positive integer' })
    .int({ error: 'a positive integer' })
    .positive({ error: 'a positive integer' })
    .optional();

const positiveNumber = () =>
  z.number({ error: 'a positive number' }).positive({ error: 'a positive number' }).optional();

const bool = () => z.boolean({ error: 'true or false' }).optional();

function oneOf<const T extends readonly [string, ...string[]]>(values: T) {
  return z.enum(values, { error: `one of ${quoteList(values)}` }).optional();
}

/** A YAML section written with nothing under it (`env:`) parses as null: treat it as empty. */
function section<S extends z.core.$ZodLooseShape>(shape: S) {
  return z
    .preprocess((v) => (v === null ? {} : v), z.strictObject(shape, { error: 'a mapping of keys' }))
    .optional();
}

const forwardEntry = z.string({ error: 'a variable name or a PREFIX_* pattern' }).refine(
  (s) => ENV_NAME.test(s) || ENV_PREFIX_GLOB.test(s),
  {
    error: (issue) =>
      issue.input === '*'
        ? 'a variable name or a PREFIX_* pattern (a bare "*" would forward every variable, credentials included; list names instead)'
        : 'a variable name or a PREFIX_* pattern ([A-Za-z_][A-Za-z0-9_]* with an optional trailing *)',
  },
);

/** A parsed `docker.volumes` entry. */
export interface VolumeSpec {
  host: string;
  container: string;
  readOnly: boolean;
}

function isCleanAbsolute(p: string): boolean {
  return p.startsWith('/') && !p.split('/').includes('..');
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

const absolutePath = (what: string) =>
  z.string({ error: `${what} (an absolute path)` }).refine((p) => isCleanAbsolute(p), {
    error: `${what} (an absolute path without ".." segments)`,
  });

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
export function describeVolume(v: VolumeSettings): string {
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

const envStatic = z
  .preprocess(
    (v) => (v === null ? {} : v),
    z
      .record(z.string(), z.string({ error: 'a string (quote the value)' }), {
        error: 'a mapping of NAME: value',
      })
      .superRefine((record, ctx) => {
        for (const name of Object.keys(record)) {
          if (!ENV_NAME.test(name)) {
            ctx.addIssue({
              code: 'custom',
              path: [name],
              params: FULL,
              message: `"${name}" is not a valid variable name; use letters, digits and "_", not starting with a digit`,
            });
          }
        }
      }),
  )
  .optional();

const workspaceShape = {
  mount: bool(),
  allowedRoots: z.array(absolutePath('an allowed root'), { error: 'a list of absolute paths' }).optional(),
};
const execShape = {
  timeoutSeconds: integer(1, 86_400),
  maxOutputChars: integer(1000, 10_000_000),
};
const lifecycleShape = { idleSeconds: integer(10) };
/** Uploads are held in memory as one Buffer, so the cap stays well inside what a Buffer holds. */
export const FILES_MAX_BYTES_LIMIT = 2 ** 31 - 1;
const filesShape = { maxBytes: integer(1, FILES_MAX_BYTES_LIMIT), mediaMode: oneOf(['copy', 'live']) };
const envShape = {
  static: envStatic,
  forward: z.array(forwardEntry, { error: 'a list of variable names' }).optional(),
  perUserPrefix: z
    .string({ error: 'an upper-case prefix ([A-Z][A-Z0-9_]*)' })
    .regex(PER_USER_PREFIX, { error: 'an upper-case prefix ([A-Z][A-Z0-9_]*)' })
    .optional(),
  redact: bool(),
  secretsFile: z
    .string({ error: 'a path to a secrets file' })
    .min(1, { error: 'a path to a secrets file' })
    .refine((s) => !s.includes('\0'), { error: 'a path to a secrets file' })
    .optional(),
};
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

/** Top-level sections: they describe the installation, not a profile. */
const serverShape = { allowHostBackend: bool() };
const limitsShape = {
  concurrentCalls: integer(1, 100_000),
  uploadBytesInFlight: integer(1024, FILES_MAX_BYTES_LIMIT),
  stagingBytes: integer(1024),
};
const auditShape = { maxCommandChars: integer(64, 1_000_000), retentionDays: integer(1, 36_500) };

/** Keys a `profiles.<name>` section may override. */
const profileShape = {
  backend: oneOf(BACKENDS),
  scope: oneOf(SCOPE_MODES),
  persistent: bool(),
  sharedKey: z.string({ error: 'a string ("" means unset)' }).optional(),
  userSandbox: bool(),
  workspace: section(workspaceShape),
  exec: section(execShape),
  lifecycle: section(lifecycleShape),
  files: section(filesShape),
  env: section(envShape),
  docker: section(dockerShape),
};

const profileSchema = z.preprocess(
  (v) => (v === null ? {} : v),
  z.strictObject(profileShape, { error: 'a mapping of profile settings' }),
);

const profilesSchema = z
  .preprocess(
    (v) => (v === null ? {} : v),
    z
      .record(z.string(), profileSchema, { error: 'a mapping of profile names to settings' })
      .superRefine((record, ctx) => {
        for (const name of Object.keys(record)) {
          if (!PROFILE_NAME.test(name)) {
            ctx.addIssue({
              code: 'custom',
              path: [name],
              params: FULL,
              message: `profile name "${name}" is not allowed; use 1-64 characters of letters, digits, ".", "_" and "-"`,
            });
          }
        }
      }),
  )
  .optional();

const configSchema = z.strictObject(
  {
    ...profileShape,
    multiProfile: bool(),
    server: section(serverShape),
    limits: section(limitsShape),
    audit: section(auditShape),
    profiles: profilesSchema,
  },
  { error: 'a mapping of config keys' },
);

type RawProfile = z.output<typeof profileSchema>;
type RawConfig = z.output<typeof configSchema>;

/** Known keys per location, for "did you mean" suggestions. */
const KNOWN_KEYS: Record<string, readonly string[]> = {
  top: Object.keys(configSchema.shape),
  profile: Object.keys(profileShape),
  workspace: Object.keys(workspaceShape),
  exec: Object.keys(execShape),
  lifecycle: Object.keys(lifecycleShape),
  files: Object.keys(filesShape),
  env: Object.keys(envShape),
  docker: Object.keys(dockerShape),
  server: Object.keys(serverShape),
  limits: Object.keys(limitsShape),
  audit: Object.keys(auditShape),
};

// ---------------------------------------------------------------------------------------------
// Zod issues -> one-line messages

type Path = readonly PropertyKey[];

/** `profiles.bot.env.forward[0]` */
function keyPath(path: Path): string {
  let out = '';
  for (const seg of path) {
    if (typeof seg === 'number') out += `[${seg}]`;
    else out += out === '' ? String(seg) : `.${String(seg)}`;
  }
  return out;
}

function within(source: string | undefined): string {
  return source === undefined ? '' : ` (in ${source})`;
}

function isInEnvStatic(path: Path): boolean {
  const rel = path[0] === 'profiles' ? path.slice(2) : path;
  return rel[0] === 'env' && rel[1] === 'static';
}

/** What the user wrote, for an error message. Never echoes an `env.static` value. */
function describeInput(input: unknown, redact: boolean): string {
  if (input === null) return 'an empty value';
  if (Array.isArray(input)) return 'a list';
  if (typeof input === 'object') return 'a mapping';
  if (redact) return `a ${typeof input}`;
  if (typeof input === 'string') {
    return JSON.stringify(input.length > 60 ? `${input.slice(0, 57)}...` : input);
  }
  return String(input);
}

function editDistance(a: string, b: string): number {
  let prev = Array.from({ length: b.length + 1 }, (_, i) => i);
  for (let i = 1; i <= a.length; i++) {
    const cur = [i];
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      cur[j] = Math.min(prev[j]! + 1, cur[j - 1]! + 1, prev[j - 1]! + cost);
    }
    prev = cur;
  }
  return prev[b.length]!;
}

function suggest(key: string, known: readonly string[]): string | undefined {
  const lower = key.toLowerCase();
  const exact = known.find((k) => k.toLowerCase() === lower);
  if (exact !== undefined) return exact;
  let best: string | undefined;
  let bestDistance = Math.max(1, Math.min(3, Math.floor(key.length / 3)));
  for (const k of known) {
    const d = editDistance(lower, k.toLowerCase());
    if (d <= bestDistance) {
      best = k;
      bestDistance = d - 1;
    }
  }
  return best;
}

function unknownKeyMessage(objectPath: Path, key: string, source: string | undefined): string {
  const inProfile = objectPath[0] === 'profiles' && objectPath.length >= 2;
  const rel = inProfile ? objectPath.slice(2) : objectPath;
  const location = rel.length === 0 ? (inProfile ? 'profile' : 'top') : String(rel[0]);
  const full = keyPath([...objectPath, key]);
  const where = source === undefined ? '' : ` in ${source}`;
  if (inProfile && rel.length === 0 && KNOWN_KEYS.top!.includes(key)) {
    return `config key "${full}" is only allowed at the top level${where}; move it out of ${keyPath(objectPath)}`;
  }
  const hint = suggest(key, KNOWN_KEYS[location] ?? []);
  return `unknown config key "${full}"${where}${hint === undefined ? '' : `; did you mean "${hint}"?`}`;
}

function issueMessages(issue: z.core.$ZodIssue, source: string | undefined): string[] {
  if (issue.code === 'unrecognized_keys') {
    return issue.keys.map((key) => unknownKeyMessage(issue.path, key, source));
  }
  const at = issue.path.length === 0 ? 'config' : `config key "${keyPath(issue.path)}"`;
  if (issue.code === 'custom' && issue.params?.['full'] === true) {
    return [`${at}: ${issue.message}${within(source)}`];
  }
  const got = describeInput(issue.input, isInEnvStatic(issue.path));
  return [`${at}: expected ${issue.message}, got ${got}${within(source)}`];
}

/** `__proto__` would silently vanish in a record (zod drops it); refuse it loudly instead. */
function protoKeyProblems(value: unknown, path: PropertyKey[], source: string | undefined): string[] {
  if (value === null || typeof value !== 'object') return [];
  const problems: string[] = [];
  for (const key of Object.keys(value)) {
    const here = [...path, key];
    if (key === '__proto__') {
      problems.push(`config key "${keyPath(here)}" is not allowed${within(source)}`);
    } else {
      problems.push(...protoKeyProblems((value as Record<string, unknown>)[key], here, source));
    }
  }
  return problems;
}

// ---------------------------------------------------------------------------------------------
// Defaults and merging

function defaultSettings(): ProfileSettings {
  return {
    backend: 'docker',
    scope: 'auto',
    persistent: true,
    sharedKey: undefined,
    userSandbox: true,
    workspace: { mount: false, allowedRoots: [] },
    exec: { timeoutSeconds: 180, maxOutputChars: 50_000 },
    lifecycle: { idleSeconds: 3600 },
    files: { maxBytes: 100 * 1024 * 1024, mediaMode: 'copy' },
    env: { static: {}, forward: [], perUserPrefix: 'BERTH_USER', redact: true },
    docker: {
      image: 'berth-sandbox:latest',
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
    },
  };
}

const DEFAULT_SERVER: ServerSettings = { allowHostBackend: false };
const DEFAULT_LIMITS: TenantLimits = {
  concurrentCalls: 16,
  uploadBytesInFlight: 256 * 1024 * 1024,
  stagingBytes: 1024 * 1024 * 1024,
};
const DEFAULT_AUDIT: AuditSettings = { maxCommandChars: 4096, retentionDays: 30 };

/** Base deep-merged with written overrides: env.static merges by key; lists are replaced. */
function applyOverrides(base: ProfileSettings, raw: RawProfile, source: string | undefined): ProfileSettings {
  const d = raw.docker ?? {};
  const e = raw.env ?? {};
  // A relative secrets file is relative to the config file that names it (checked in envProblems).
  const secretsFile = e.secretsFile === undefined ? base.env.secretsFile
    : isAbsolute(e.secretsFile) || source === undefined ? e.secretsFile : resolve(dirname(source), e.secretsFile);
  return {
    backend: raw.backend ?? base.backend,
    scope: raw.scope ?? base.scope,
    persistent: raw.persistent ?? base.persistent,
    sharedKey:
      raw.sharedKey === undefined ? base.sharedKey : raw.sharedKey === '' ? undefined : raw.sharedKey,
    userSandbox: raw.userSandbox ?? base.userSandbox,
    workspace: {
      mount: raw.workspace?.mount ?? base.workspace.mount,
      allowedRoots: [...(raw.workspace?.allowedRoots ?? base.workspace.allowedRoots)],
    },
    exec: {
      timeoutSeconds: raw.exec?.timeoutSeconds ?? base.exec.timeoutSeconds,
      maxOutputChars: raw.exec?.maxOutputChars ?? base.exec.maxOutputChars,
    },
    lifecycle: { idleSeconds: raw.lifecycle?.idleSeconds ?? base.lifecycle.idleSeconds },
    files: {
      maxBytes: raw.files?.maxBytes ?? base.files.maxBytes,
      mediaMode: raw.files?.mediaMode ?? base.files.mediaMode,
    },
    env: {
      static: { ...base.env.static, ...e.static },
      forward: [...(e.forward ?? base.env.forward)],
      perUserPrefix: e.perUserPrefix ?? base.env.perUserPrefix,
      redact: e.redact ?? base.env.redact,
      ...(secretsFile === undefined ? {} : { secretsFile }),
    },
    docker: {
      image: d.image ?? base.docker.image,
      network: d.network ?? base.docker.network,
      memoryMb: d.memoryMb ?? base.docker.memoryMb,
      cpus: d.cpus ?? base.docker.cpus,
      pidsLimit: d.pidsLimit ?? base.docker.pidsLimit,
      shmSizeMb: d.shmSizeMb ?? base.docker.shmSizeMb,
      tmpSizeMb: d.tmpSizeMb ?? base.docker.tmpSizeMb,
      ephemeralSizeMb: d.ephemeralSizeMb ?? base.docker.ephemeralSizeMb,
      runAsHostUser: d.runAsHostUser ?? base.docker.runAsHostUser,
      volumes: d.volumes === undefined ? base.docker.volumes.map((v) => ({ ...v })) : d.volumes.map(volumeSettings),
      diskMb: d.diskMb ?? base.docker.diskMb,
    },
  };
}

function deepFreeze<T>(value: T): T {
  if (value !== null && typeof value === 'object' && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const child of Object.values(value)) deepFreeze(child);
  }
  return value;
}

// ---------------------------------------------------------------------------------------------
// Cross-field rules: settings that contradict each other or would be inert

/** The top level or one profile section, with what was written there and the merged result. */
interface Section {
  /** `undefined` for the top level. */
  profile: string | undefined;
  /** What this section itself wrote. */
  written: RawProfile;
  settings: ProfileSettings;
}

function keyOf(section: Section, key: string): string {
  return section.profile === undefined ? key : `profiles.${section.profile}.${key}`;
}

/**
 * For a profile, a rule fires only when the profile wrote one of the keys involved; otherwise
 * the same values are the top level's and the top-level check already reports them.
 */
function involves(section: Section, keys: readonly (keyof RawProfile)[]): boolean {
  return section.profile === undefined || keys.some((k) => section.written[k] !== undefined);
}

function sharedKeyProblems(section: Section): string[] {
  const { settings, written } = section;
  const at = keyOf(section, 'sharedKey');
  if (settings.scope === 'shared') {
    if (settings.sharedKey !== undefined || !involves(section, ['scope', 'sharedKey'])) return [];
    return [
      `config key "${at}": scope "shared" needs a non-empty sharedKey; set ${at} to a name for the shared sandbox, or choose another scope`,
    ];
  }
  if (settings.sharedKey === undefined) return [];
  if (!involves(section, ['scope', 'sharedKey', 'backend', 'persistent'])) return [];
  // A key inherited from the top level can be unset for this profile alone with "".
  const inherited = section.profile !== undefined && written.sharedKey === undefined;
  const what = inherited ? `sharedKey (set at the top level)` : 'sharedKey';
  const remedy = inherited ? `set ${at}: "" to unset it for this profile` : 'remove sharedKey';
  const scopeKey = keyOf(section, 'scope');
  if (settings.scope === 'auto') {
    if (isContainerBackend(settings.backend) && settings.persistent) return [];
    const reason = isContainerBackend(settings.backend)
      ? 'persistent is false'
      : `backend "${settings.backend}" is not a container backend`;
    return [
      `config key "${at}": in scope "auto" ${what} only applies to a persistent container backend (docker with persistent: true), and here ${reason}, so it would have no effect; ${remedy}, or set ${scopeKey}: shared to share one sandbox on any backend`,
    ];
  }
  return [
    `config key "${at}": scope "${settings.scope}" never uses ${what}, so it would have no effect; ${remedy}, or set ${scopeKey}: shared (or auto) to share a sandbox`,
  ];
}

function userSandboxProblems(section: Section): string[] {
  // Only a value written in this section: one inherited from the top level is meaningful
  // there (top-level scope auto), and a profile has no way to unset it.
  if (section.written.userSandbox === undefined || section.settings.scope === 'auto') return [];
  const at = keyOf(section, 'userSandbox');
  return [
    `config key "${at}": userSandbox only applies in scope "auto" (here scope is "${section.settings.scope}"), so it would have no effect; remove it or set ${keyOf(section, 'scope')}: auto`,
  ];
}

function secretsFileProblems(section: Section): string[] {
  const written = section.written.env?.secretsFile;
  if (written === undefined || isAbsolute(written) || section.settings.env.secretsFile !== written) return [];
  // Still relative after merging: there is no config file to be relative to.
  return [
    `config key "${keyOf(section, 'env.secretsFile')}": "${written}" is a relative path and this config comes from no file; use an absolute path`,
  ];
}

function envProblems(section: Section): string[] {
  const wroteEnv = section.written.env?.static !== undefined || section.written.env?.forward !== undefined;
  if (section.profile !== undefined && !wroteEnv) return [];
  const { static: literal, forward } = section.settings.env;
  const at = keyOf(section, 'env.forward');
  return forward
    .filter((name) => Object.hasOwn(literal, name))
    .map(
      (name) =>
        `config key "${at}": "${name}" is also in env.static; a variable is either a literal (env.static) or forwarded from berth's environment (env.forward), not both; remove it from one of them`,
    );
}

/** Rules about sections that only container backends use, judged over every place they apply. */
function containerOnlyProblems(top: Section, profiles: readonly Section[]): string[] {
  const problems: string[] = [];
  const usesContainer = (s: Section) => isContainerBackend(s.settings.backend);

  // A top-level value applies to the top level (profiles without a section) and to every
  // profile that does not override it.
  if (top.written.workspace?.mount === true) {
    const appliesTo = [top, ...profiles.filter((p) => p.written.workspace?.mount === undefined)];
    if (!appliesTo.some(usesContainer)) {
      problems.push(
        `config key "workspace.mount": local and ssh never mount, and no profile it applies to uses a container backend; remove workspace.mount or use backend: docker`,
      );
    }
  }
  if (top.written.docker !== undefined && ![top, ...profiles].some(usesContainer)) {
    problems.push(
      `config key "docker": no profile uses backend docker, so the docker section would have no effect; remove it or set backend: docker`,
    );
  }
  for (const p of profiles) {
    const backend = p.settings.backend;
    if (p.written.workspace?.mount === true && !usesContainer(p)) {
      problems.push(
        `config key "${keyOf(p, 'workspace.mount')}": profile "${p.profile}" uses backend "${backend}", and local and ssh never mount; remove workspace.mount or use backend: docker`,
      );
    }
    if (p.written.docker !== undefined && !usesContainer(p)) {
      problems.push(
        `config key "${keyOf(p, 'docker')}": profile "${p.profile}" uses backend "${backend}", so its docker section would have no effect; remove it or set ${keyOf(p, 'backend')}: docker`,
      );
    }
  }
  return problems;
}

function crossFieldProblems(top: Section, profiles: readonly Section[]): string[] {
  const problems: string[] = [];
  for (const s of [top, ...profiles]) {
    problems.push(...sharedKeyProblems(s), ...userSandboxProblems(s), ...envProblems(s), ...secretsFileProblems(s));
  }
  problems.push(...containerOnlyProblems(top, profiles));
  return problems;
}

// ---------------------------------------------------------------------------------------------

/**
 * Validates raw config (as read from YAML) and returns the immutable policy object.
 * `source` names the file in error messages. Throws `ConfigError` listing every problem.
 *
 * @example
 * const config = parseConfig({ backend: 'local', profiles: { bot: { scope: 'session' } } }, 'berth.yaml');
 * settingsFor(config, 'bot').scope; // 'session'
 */
export function parseConfig(raw: unknown, source?: string): BerthConfig {
  const input = raw ?? {};
  const protoProblems = protoKeyProblems(input, [], source);
  if (protoProblems.length > 0) throw new ConfigError(protoProblems.join('; '));

  const parsed = configSchema.safeParse(input, { reportInput: true });
  if (!parsed.success) {
    const messages = parsed.error.issues.flatMap((issue) => issueMessages(issue, source));
    throw new ConfigError(messages.join('; '));
  }
  const written: RawConfig = parsed.data;

  const { multiProfile, server, limits, audit, profiles: writtenProfiles = {}, ...topWritten } = written;
  const base = applyOverrides(defaultSettings(), topWritten, source);
  const top: Section = { profile: undefined, written: topWritten, settings: base };
  const profileSections = Object.entries(writtenProfiles).map(
    ([name, overrides]): Section => ({
      profile: name,
      written: overrides,
      settings: applyOverrides(base, overrides, source),
    }),
  );

  const problems = crossFieldProblems(top, profileSections);
  if (problems.length > 0) {
    throw new ConfigError(problems.map((p) => `${p}${within(source)}`).join('; '));
  }

  const profiles: Record<string, ProfileSettings> = {};
  for (const s of profileSections) {
    profiles[s.profile!] = s.settings;
  }
  return deepFreeze({
    multiProfile: multiProfile ?? false,
    server: { ...DEFAULT_SERVER, ...definedOnly(server) },
    limits: { ...DEFAULT_LIMITS, ...definedOnly(limits) },
    audit: { ...DEFAULT_AUDIT, ...definedOnly(audit) },
    base,
    profiles,
    source,
  });
}

/** The keys of a written section that have a value (zod keeps written `undefined`s out anyway). */
function definedOnly<T extends object>(section: T | undefined): Partial<T> {
  return Object.fromEntries(Object.entries(section ?? {}).filter(([, v]) => v !== undefined)) as Partial<T>;
}
