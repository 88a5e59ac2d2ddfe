import { dirname, isAbsolute, resolve } from 'node:path';
import { checkCredentials, type CredentialSpec } from '../egress/credentials.js';
import { emptyPolicy, parseEgressPolicy, type EgressPolicy } from '../egress/policy.js';
import type { RawProfile } from './core-schema.js';
import type { AuditSettings, CoreSettings, EgressProxySettings, ServerSettings, TenantLimits } from './types.js';

/*
 * berth's own settings: their defaults, and how what one place wrote merges over its base (the
 * defaults for the top level, the top level for a profile).
 */

/** berth's own defaults for a place; `backend` is the registry's default (design §2: never the host by default). */
export function defaultCore(backend: string): CoreSettings {
  return {
    backend,
    scope: 'auto',
    // Each conversation its own sandbox unless the operator opts into sharing (scope: profile,
    // or persistent: true, which shares one sandbox across sessions in scope auto: design §3).
    persistent: false,
    sharedKey: undefined,
    userSandbox: true,
    workspace: { mount: false, allowedRoots: [] },
    exec: { timeoutSeconds: 180, maxOutputChars: 50_000 },
    // An idle persistent sandbox hibernates after 10 minutes: a resume costs about a container
    // start (docs/design.md §6), which a conversation quiet for that long does not notice, and a
    // hibernated sandbox holds no engine resources (a running one ~18 engine descriptors).
    lifecycle: { idleSeconds: 3600, hibernateSeconds: 600 },
    warmPool: { size: 0 },
    files: { maxBytes: 100 * 1024 * 1024, mediaMode: 'copy' },
    env: { static: {}, forward: [], perUserPrefix: 'BERTH_USER', redact: true },
    // Open by default: an allowlist is the operator's choice per profile
    // (README, "Egress and credentials"); open still never reaches the host (design §8).
    egress: emptyPolicy('open'),
    credentials: [],
  };
}

export const DEFAULT_EGRESS_PROXY: EgressProxySettings = { upstreamCaFile: undefined, maxConnectionsPerSandbox: 256, listen: undefined, advertise: undefined };

export const DEFAULT_SERVER: ServerSettings = {
  allowHostBackend: false,
  metrics: { perTenant: false },
  maxConnections: 4096,
  maxConnectionsPerAddress: 1024,
  headerTimeoutSeconds: 10,
  keepAliveSeconds: 5,
  bodyStallSeconds: 30,
};

export const DEFAULT_LIMITS: TenantLimits = {
  concurrentCalls: 16,
  uploadBytesInFlight: 256 * 1024 * 1024,
  stagingBytes: 1024 * 1024 * 1024,
  mcpSessions: 32,
  // Enough for a busy agent team or a bot's active users; at least twenty tenants fit one engine
  // (about 1,000 sandboxes), and memory and disk are bounded by the host itself by default.
  sandboxes: 50,
  // No bound by default: an operator who keeps a sandbox per user of a bot sets it below what the
  // engine holds (docs/design.md §6).
  liveSandboxes: undefined,
  memoryMb: undefined,
  diskMb: undefined,
  // Two checkpoints for each sandbox a tenant may hold by default (limits.sandboxes).
  snapshots: 100,
  snapshotBytes: undefined,
  // As long as the audit keeps the entries that say who made them: no snapshot outlives its record.
  snapshotRetentionDays: 30,
};

export const DEFAULT_AUDIT: AuditSettings = { maxCommandChars: 4096, retentionDays: 30 };

/**
 * `base` deep-merged with what one place wrote of berth's own keys: env.static merges by key;
 * lists are replaced. `source` is the config file a relative secrets file is relative to.
 */
export function mergeCore(base: CoreSettings, raw: RawProfile, source: string | undefined): CoreSettings {
  const e = raw.env ?? {};
  // A section replaces the inherited one whole (an allowlist is read as one list, never merged).
  const egress = raw.egress === undefined ? base.egress : parseEgressPolicy(raw.egress);
  // A relative secrets file is relative to the config file that names it (checked in the cross-field rules).
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
    lifecycle: {
      idleSeconds: raw.lifecycle?.idleSeconds ?? base.lifecycle.idleSeconds,
      hibernateSeconds: raw.lifecycle?.hibernateSeconds ?? base.lifecycle.hibernateSeconds,
    },
    warmPool: { size: raw.warmPool?.size ?? base.warmPool.size },
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
    egress,
    credentials: raw.credentials === undefined ? base.credentials : credentialSpecs(raw.credentials, egress),
  };
}

/** The written `credentials:` parsed against the place's policy; what does not check is reported by the cross-field rules. */
function credentialSpecs(raw: unknown, egress: EgressPolicy): readonly CredentialSpec[] {
  const r = checkCredentials(raw, egress);
  return r.ok ? r.specs : [];
}
