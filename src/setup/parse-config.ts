import { dirname, isAbsolute, resolve } from 'node:path';
import type { BackendCatalog } from '../backends/catalog.js';
import type { BackendModule } from '../backends/module.js';
import { BUILTIN_BACKENDS, DEFAULT_BACKEND } from '../backends/registry.js';
import { ConfigError } from '../errors.js';
import { composeSchema, type RawConfig, type RawProfile } from './compose-schema.js';
import { crossFieldProblems, serverProblems, type Section } from './cross-field-rules.js';
import { issueMessages, protoKeyProblems, within } from './issue-messages.js';
import type { AuditSettings, BerthConfig, CoreSettings, ProfileSettings, ServerSettings, TenantLimits } from './types.js';
import { definedOnly } from './zod-kit.js';

export { FILES_MAX_BYTES_LIMIT } from './compose-schema.js';
export { describeVolume, parseVolume, volumeSettings, type VolumeSpec } from '../backends/docker/settings.js';

/*
 * One strict schema for berth's config file (design §2, §3, §7): berth's own keys plus one
 * section per backend module (compose-schema.ts), the cross-field rules (cross-field-rules.ts),
 * then defaults and profile merging in plain code here.
 */

function defaultCore(): CoreSettings {
  return {
    backend: DEFAULT_BACKEND,
    scope: 'auto',
    // Each conversation its own sandbox unless the operator opts into sharing (scope: profile,
    // or persistent: true, which shares one sandbox across sessions in scope auto: design §3).
    persistent: false,
    sharedKey: undefined,
    userSandbox: true,
    workspace: { mount: false, allowedRoots: [] },
    exec: { timeoutSeconds: 180, maxOutputChars: 50_000 },
    lifecycle: { idleSeconds: 3600 },
    warmPool: { size: 0 },
    files: { maxBytes: 100 * 1024 * 1024, mediaMode: 'copy' },
    env: { static: {}, forward: [], perUserPrefix: 'BERTH_USER', redact: true },
  };
}

function defaultSettings(sections: readonly BackendModule[]): ProfileSettings {
  const out: Record<string, unknown> = { ...defaultCore() };
  for (const m of sections) out[m.name] = m.settings!.defaults();
  return out as unknown as ProfileSettings;
}

const DEFAULT_SERVER: ServerSettings = {
  allowHostBackend: false,
  metrics: { perTenant: false },
  maxConnections: 4096,
  maxConnectionsPerAddress: 1024,
  headerTimeoutSeconds: 10,
  keepAliveSeconds: 5,
  bodyStallSeconds: 30,
};
const DEFAULT_LIMITS: TenantLimits = {
  concurrentCalls: 16,
  uploadBytesInFlight: 256 * 1024 * 1024,
  stagingBytes: 1024 * 1024 * 1024,
  mcpSessions: 32,
  // Enough for a busy agent team or a bot's active users; at least twenty tenants fit one engine
  // (about 1,000 sandboxes), and memory and disk are bounded by the host itself by default.
  sandboxes: 50,
  memoryMb: undefined,
  diskMb: undefined,
};
const DEFAULT_AUDIT: AuditSettings = { maxCommandChars: 4096, retentionDays: 30 };

/** Base deep-merged with written overrides: env.static merges by key; lists are replaced; each module merges its own section. */
function applyOverrides(base: ProfileSettings, raw: RawProfile, source: string | undefined, sections: readonly BackendModule[]): ProfileSettings {
  const e = raw.env ?? {};
  // A relative secrets file is relative to the config file that names it (checked in the cross-field rules).
  const secretsFile = e.secretsFile === undefined ? base.env.secretsFile
    : isAbsolute(e.secretsFile) || source === undefined ? e.secretsFile : resolve(dirname(source), e.secretsFile);
  const core: CoreSettings = {
    backend: (raw.backend ?? base.backend) as CoreSettings['backend'],
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
  };
  const out: Record<string, unknown> = { ...core };
  for (const m of sections) {
    const baseSection = (base as unknown as Record<string, unknown>)[m.name];
    out[m.name] = m.settings!.merge(baseSection, (raw[m.name] ?? {}) as Parameters<NonNullable<BackendModule['settings']>['merge']>[1]);
  }
  return out as unknown as ProfileSettings;
}

function deepFreeze<T>(value: T): T {
  if (value !== null && typeof value === 'object' && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const child of Object.values(value)) deepFreeze(child);
  }
  return value;
}

export interface ParseOptions {
  /** The backend modules to validate against (default: the registry's). Tests add a fake one. */
  backends?: BackendCatalog;
}

/**
 * Validates raw config (as read from YAML) and returns the immutable policy object.
 * `source` names the file in error messages. Throws `ConfigError` listing every problem.
 *
 * @example
 * const config = parseConfig({ backend: 'local', profiles: { bot: { scope: 'session' } } }, 'berth.yaml');
 * settingsFor(config, 'bot').scope; // 'session'
 */
export function parseConfig(raw: unknown, source?: string, opts: ParseOptions = {}): BerthConfig {
  const backends = opts.backends ?? BUILTIN_BACKENDS;
  const input = raw ?? {};
  const protoProblems = protoKeyProblems(input, [], source);
  if (protoProblems.length > 0) throw new ConfigError(protoProblems.join('; '));

  const { schema, knownKeys, sections } = composeSchema(backends);
  const parsed = schema.safeParse(input, { reportInput: true });
  if (!parsed.success) {
    const messages = parsed.error.issues.flatMap((issue) => issueMessages(issue, source, knownKeys));
    throw new ConfigError(messages.join('; '));
  }
  const written: RawConfig = parsed.data;

  const { multiProfile, server, limits, audit, profiles: writtenProfiles = {}, ...topWritten } = written;
  const base = applyOverrides(defaultSettings(sections), topWritten, source, sections);
  const top: Section = { profile: undefined, written: topWritten, settings: base };
  const profileSections = Object.entries(writtenProfiles).map(
    ([name, overrides]): Section => ({
      profile: name,
      written: overrides,
      settings: applyOverrides(base, overrides, source, sections),
    }),
  );

  const serverSettings: ServerSettings = {
    ...DEFAULT_SERVER,
    ...definedOnly(server),
    metrics: { ...DEFAULT_SERVER.metrics, ...definedOnly(server?.metrics) },
  };
  const problems = [...crossFieldProblems(top, profileSections, backends), ...serverProblems(serverSettings)];
  if (problems.length > 0) {
    throw new ConfigError(problems.map((p) => `${p}${within(source)}`).join('; '));
  }

  const profiles: Record<string, ProfileSettings> = {};
  for (const s of profileSections) {
    profiles[s.profile!] = s.settings;
  }
  const settled = deepFreeze({
    multiProfile: multiProfile ?? false,
    server: serverSettings,
    limits: { ...DEFAULT_LIMITS, ...definedOnly(limits) },
    audit: { ...DEFAULT_AUDIT, ...definedOnly(audit) },
    base,
    profiles,
    source,
  });
  // The catalog is immutable by construction; freezing it would reach into zod's schema objects.
  return Object.freeze({ ...settled, backends });
}
