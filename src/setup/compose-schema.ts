import * as z from 'zod';
import type { BackendCatalog } from '../backends/catalog.js';
import type { BackendModule } from '../backends/module.js';
import { BerthError } from '../errors.js';
import type { KnownKeys } from './issue-messages.js';
import { SCOPE_MODES } from './types.js';
import { absolutePath, bool, FULL, integer, oneOf, section } from './zod-kit.js';

/*
 * The config schema, composed from berth's own keys and one section per backend module that has
 * settings (`docker:`): a module's section appears in the schema (top level and every profile)
 * by adding the module to the catalog.
 */

const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;
const ENV_PREFIX_GLOB = /^[A-Za-z_][A-Za-z0-9_]*\*$/;
const PER_USER_PREFIX = /^[A-Z][A-Z0-9_]*$/;
const PROFILE_NAME = /^[A-Za-z0-9._-]{1,64}$/;

const forwardEntry = z.string({ error: 'a variable name or a PREFIX_* pattern' }).refine(
  (s) => ENV_NAME.test(s) || ENV_PREFIX_GLOB.test(s),
  {
    error: (issue) =>
      issue.input === '*'
        ? 'a variable name or a PREFIX_* pattern (a bare "*" would forward every variable, credentials included; list names instead)'
        : 'a variable name or a PREFIX_* pattern ([A-Za-z_][A-Za-z0-9_]* with an optional trailing *)',
  },
);

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
/** Sandboxes kept started ahead for new ephemeral sessions without a mount (0: none). */
export const WARM_POOL_MAX = 64;
const warmPoolShape = { size: integer(0, WARM_POOL_MAX) };
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
/** Top-level sections: they describe the installation, not a profile. */
const serverMetricsShape = { perTenant: bool() };
const serverShape = {
  allowHostBackend: bool(),
  metrics: section(serverMetricsShape),
  maxConnections: integer(1, 1_000_000),
  maxConnectionsPerAddress: integer(1, 1_000_000),
  headerTimeoutSeconds: integer(1, 3600),
  keepAliveSeconds: integer(1, 3600),
  bodyStallSeconds: integer(1, 86_400),
};
const limitsShape = {
  concurrentCalls: integer(1, 100_000),
  uploadBytesInFlight: integer(1024, FILES_MAX_BYTES_LIMIT),
  stagingBytes: integer(1024),
  mcpSessions: integer(1, 100_000),
  sandboxes: integer(1, 1_000_000),
  memoryMb: integer(1),
  diskMb: integer(1),
};
const auditShape = { maxCommandChars: integer(64, 1_000_000), retentionDays: integer(1, 36_500) };

/** berth's own keys a `profiles.<name>` section may override (the modules' sections come beside them). */
function coreProfileShape(backendNames: readonly [string, ...string[]]) {
  return {
    backend: oneOf(backendNames),
    scope: oneOf(SCOPE_MODES),
    persistent: bool(),
    sharedKey: z.string({ error: 'a string ("" means unset)' }).optional(),
    userSandbox: bool(),
    workspace: section(workspaceShape),
    exec: section(execShape),
    lifecycle: section(lifecycleShape),
    warmPool: section(warmPoolShape),
    files: section(filesShape),
    env: section(envShape),
  };
}

/** What one section (the top level or a profile) wrote of berth's own keys. */
export type RawCore = z.output<z.ZodObject<ReturnType<typeof coreProfileShape>, z.core.$strict>>;
/** What one section wrote: berth's own keys, and each module's section under its name. */
export type RawProfile = RawCore & { readonly [moduleSection: string]: unknown };
/** What the whole file wrote. */
export type RawConfig = RawProfile & {
  multiProfile?: boolean | undefined;
  server?: {
    allowHostBackend?: boolean | undefined; metrics?: { perTenant?: boolean | undefined } | undefined;
    maxConnections?: number | undefined; maxConnectionsPerAddress?: number | undefined;
    headerTimeoutSeconds?: number | undefined; keepAliveSeconds?: number | undefined; bodyStallSeconds?: number | undefined;
  } | undefined;
  limits?: {
    concurrentCalls?: number | undefined; uploadBytesInFlight?: number | undefined; stagingBytes?: number | undefined; mcpSessions?: number | undefined;
    sandboxes?: number | undefined; memoryMb?: number | undefined; diskMb?: number | undefined;
  } | undefined;
  audit?: { maxCommandChars?: number | undefined; retentionDays?: number | undefined } | undefined;
  profiles?: Record<string, RawProfile> | undefined;
};

/** The schema for one catalog of backend modules, with what the error messages need. */
export interface ComposedSchema {
  schema: z.ZodType<RawConfig>;
  knownKeys: KnownKeys;
  /** The modules that have a config section, in registry order. */
  sections: readonly BackendModule[];
}

/** Keys berth itself uses at the top level or in a profile: no module section may take one. */
const TOP_ONLY_KEYS = ['multiProfile', 'server', 'limits', 'audit', 'profiles'] as const;

/**
 * The config schema for `catalog`: berth's keys plus `<module>:` for each module with settings.
 *
 * @throws BerthError (internal) when a module's section name collides with one of berth's keys.
 */
export function composeSchema(catalog: BackendCatalog): ComposedSchema {
  const core = coreProfileShape(catalog.names);
  const sections = catalog.modules.filter((m) => m.settings !== undefined);
  const taken = new Set<string>([...Object.keys(core), ...TOP_ONLY_KEYS]);
  for (const m of sections) {
    if (taken.has(m.name)) throw new BerthError('internal', `backend module "${m.name}" would take berth's own config key "${m.name}" for its section; rename the module`);
  }
  const profileShape = {
    ...core,
    ...Object.fromEntries(sections.map((m) => [m.name, section(m.settings!.shape)])),
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
  const topShape = {
    ...profileShape,
    multiProfile: bool(),
    server: section(serverShape),
    limits: section(limitsShape),
    audit: section(auditShape),
    profiles: profilesSchema,
  };
  const schema = z.strictObject(topShape, { error: 'a mapping of config keys' }) as unknown as z.ZodType<RawConfig>;
  const knownKeys: Record<string, readonly string[]> = {
    top: Object.keys(topShape),
    profile: Object.keys(profileShape),
    workspace: Object.keys(workspaceShape),
    exec: Object.keys(execShape),
    lifecycle: Object.keys(lifecycleShape),
    warmPool: Object.keys(warmPoolShape),
    files: Object.keys(filesShape),
    env: Object.keys(envShape),
    ...Object.fromEntries(sections.map((m) => [m.name, Object.keys(m.settings!.shape)])),
    server: Object.keys(serverShape),
    limits: Object.keys(limitsShape),
    audit: Object.keys(auditShape),
  };
  return { schema, knownKeys, sections };
}
