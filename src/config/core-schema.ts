import * as z from 'zod';
import { checkEgressPolicy } from '../egress/policy.js';
import { parseProxyAddress } from '../egress/proxy-address.js';
import { SCOPE_MODES } from './types.js';
import { absolutePath, bool, FULL, integer, oneOf, section } from './zod-kit.js';

/*
 * The schema of berth's own keys (design §2, §3, §7): what the top level and a profile may write
 * besides the backend modules' sections, which setup/ composes beside these.
 */

const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;
const ENV_PREFIX_GLOB = /^[A-Za-z_][A-Za-z0-9_]*\*$/;
const PER_USER_PREFIX = /^[A-Z][A-Z0-9_]*$/;
/** Names a `profiles:` section may use. */
export const PROFILE_NAME = /^[A-Za-z0-9._-]{1,64}$/;

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
/** 0 turns hibernation off; otherwise at least 10 s, as `idleSeconds` (the sweep runs at most every 2.5 s). */
const hibernateSeconds = z.number({ error: '0 (off) or an integer of at least 10' }).int({ error: '0 (off) or an integer of at least 10' })
  .refine((v) => v === 0 || v >= 10, { error: '0 (off) or an integer of at least 10' }).optional();
const lifecycleShape = { idleSeconds: integer(10), hibernateSeconds };
/** Sandboxes kept started ahead for new ephemeral sessions without a mount (0: none). */
const WARM_POOL_MAX = 64;
const warmPoolShape = { size: integer(0, WARM_POOL_MAX) };
/** Uploads are held in memory as one Buffer, so the cap stays well inside what a Buffer holds. */
const FILES_MAX_BYTES_LIMIT = 2 ** 31 - 1;
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
/** `egress.allow[2].cidr` -> ['allow', 2, 'cidr'] (the path below the section's own key). */
function issuePath(path: string): (string | number)[] {
  return path.split('.').slice(1).flatMap((seg) => seg.split(/\[(\d+)\]/).filter((x) => x !== '').map((x) => (/^\d+$/.test(x) ? Number(x) : x)));
}

/**
 * `egress:` as written: checked whole by the egress library, which names each problem's path and
 * fix (docs/egress.md); parsed into its policy when the settings are merged.
 */
const egressSection = z.unknown().superRefine((raw, ctx) => {
  const r = checkEgressPolicy(raw);
  if (r.ok) return;
  for (const issue of r.issues) ctx.addIssue({ code: 'custom', path: issuePath(issue.path), params: FULL, message: issue.message });
}).optional();

/**
 * `credentials:` as written: a mapping of names to `{ from, hosts, inject }`, checked against the
 * place's egress policy in the cross-field rules (a profile may inherit either).
 */
const credentialsSection = z.preprocess(
  (v) => (v === null ? {} : v),
  z.record(z.string(), z.unknown(), { error: 'a mapping of variable names to { from, hosts }' }),
).optional();

/** `IP:port` of the shared listener (egress/proxy-address.ts). */
const proxyAddress = () => z.string({ error: 'an IP address and a port, e.g. "10.0.0.5:3128"' }).superRefine((v, ctx) => {
  const parsed = parseProxyAddress(v);
  if (typeof parsed === 'string') ctx.addIssue({ code: 'custom', message: parsed });
}).optional();

/** Installation-wide egress settings (top level only): what the one proxy of a berth process trusts and bounds. */
const egressProxyShape = {
  upstreamCaFile: absolutePath('a PEM bundle of CAs the proxy trusts upstream besides the system store').optional(),
  maxConnectionsPerSandbox: integer(1, 65_536),
  listen: proxyAddress(),
  advertise: proxyAddress(),
};

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
  liveSandboxes: integer(1, 1_000_000),
  memoryMb: integer(1),
  diskMb: integer(1),
  snapshots: integer(0, 1_000_000),
  snapshotBytes: integer(1024),
  snapshotRetentionDays: integer(1, 36_500),
};
const auditShape = { maxCommandChars: integer(64, 1_000_000), retentionDays: integer(1, 36_500) };

/** berth's own keys a `profiles.<name>` section may override (the modules' sections come beside them). */
export function coreProfileShape(backendNames: readonly [string, ...string[]]) {
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
    egress: egressSection,
    credentials: credentialsSection,
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
    sandboxes?: number | undefined; liveSandboxes?: number | undefined; memoryMb?: number | undefined; diskMb?: number | undefined;
    snapshots?: number | undefined; snapshotBytes?: number | undefined; snapshotRetentionDays?: number | undefined;
  } | undefined;
  audit?: { maxCommandChars?: number | undefined; retentionDays?: number | undefined } | undefined;
  egressProxy?: {
    upstreamCaFile?: string | undefined; maxConnectionsPerSandbox?: number | undefined; listen?: string | undefined; advertise?: string | undefined;
  } | undefined;
  profiles?: Record<string, RawProfile> | undefined;
};

/** The top-level sections: they describe the installation, so no profile writes them. */
export const topOnlyShape = {
  multiProfile: bool(),
  server: section(serverShape),
  limits: section(limitsShape),
  audit: section(auditShape),
  egressProxy: section(egressProxyShape),
};

/** The keys of each of berth's own sections, for "did you mean" hints (`top` and `profile` come from the composed schema). */
export const coreKnownKeys: Readonly<Record<string, readonly string[]>> = {
  workspace: Object.keys(workspaceShape),
  exec: Object.keys(execShape),
  lifecycle: Object.keys(lifecycleShape),
  warmPool: Object.keys(warmPoolShape),
  files: Object.keys(filesShape),
  env: Object.keys(envShape),
  server: Object.keys(serverShape),
  limits: Object.keys(limitsShape),
  audit: Object.keys(auditShape),
  egressProxy: Object.keys(egressProxyShape),
};
