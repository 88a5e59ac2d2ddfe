import type { BackendCatalog } from '../backends/catalog.js';
import { sectionOf, type BackendModule } from '../backends/module.js';
import { BUILTIN_BACKENDS, DEFAULT_BACKEND } from '../backends/registry.js';
import type { RawProfile } from '../config/core-schema.js';
import { DEFAULT_AUDIT, DEFAULT_EGRESS_PROXY, DEFAULT_LIMITS, DEFAULT_SERVER, defaultCore, mergeCore } from '../config/core-settings.js';
import { crossFieldProblems, serverProblems, sharedProxyProblems, type Section } from '../config/cross-field-rules.js';
import { issueMessages, protoKeyProblems, within } from '../config/issue-messages.js';
import type { ServerSettings } from '../config/types.js';
import { definedOnly } from '../config/zod-kit.js';
import { ConfigError } from '../errors.js';
import type { BerthConfig, ProfileSettings } from './berth-config.js';
import { composeSchema } from './compose-schema.js';
import { sectionProblems } from './section-rules.js';

/*
 * One strict schema for berth's config file (design §2, §3, §7): berth's own keys (config/) plus
 * one section per backend module of the catalog (compose-schema.ts), the cross-field rules of
 * both, then defaults and profile merging: berth's keys by config/core-settings.ts, each section
 * by its module.
 */

type Sectioned = readonly BackendModule[];

function defaultSettings(sections: Sectioned): ProfileSettings {
  const out: Record<string, unknown> = { ...defaultCore(DEFAULT_BACKEND) };
  for (const m of sections) out[m.name] = m.settings!.defaults();
  return out as unknown as ProfileSettings;
}

/** `base` with what one place wrote over it: berth's own keys, and each module's section by its module. */
function applyOverrides(base: ProfileSettings, raw: RawProfile, source: string | undefined, sections: Sectioned): ProfileSettings {
  const out: Record<string, unknown> = { ...mergeCore(base, raw, source) };
  for (const m of sections) {
    out[m.name] = m.settings!.merge(sectionOf(m, base), (raw[m.name] ?? {}) as Parameters<NonNullable<BackendModule['settings']>['merge']>[1]);
  }
  return out as unknown as ProfileSettings;
}

/** Freezes `value` and everything under it (a section its module froze already still has its lists frozen here). */
function deepFreeze<T>(value: T): T {
  if (value !== null && typeof value === 'object') {
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
  const written = parsed.data;

  const { multiProfile, server, limits, audit, egressProxy, profiles: writtenProfiles = {}, ...topWritten } = written;
  const base = applyOverrides(defaultSettings(sections), topWritten, source, sections);
  const top: Section<ProfileSettings> = { profile: undefined, written: topWritten, settings: base };
  const profileSections = Object.entries(writtenProfiles).map(
    ([name, overrides]): Section<ProfileSettings> => ({
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
  const egressProxySettings = { ...DEFAULT_EGRESS_PROXY, ...definedOnly(egressProxy) };
  const problems = [
    ...crossFieldProblems(top, profileSections, backends), ...sectionProblems(top, profileSections, backends), ...serverProblems(serverSettings),
    ...sharedProxyProblems([top, ...profileSections], egressProxySettings, backends),
  ];
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
    egressProxy: egressProxySettings,
    base,
    profiles,
    source,
  });
  // The catalog is immutable by construction; freezing it would reach into zod's schema objects.
  return Object.freeze({ ...settled, backends });
}

/**
 * Throws a ConfigError when `config` is not what parseConfig returns: a plain object written by
 * hand would otherwise fail deep inside with a TypeError.
 */
export function assertParsedConfig(config: unknown): asserts config is BerthConfig {
  const backends = (config as { backends?: { module?: unknown } } | null | undefined)?.backends;
  if (typeof backends?.module !== 'function') {
    throw new ConfigError('the config passed to Broker.open is a plain object, not a parsed config; pass parseConfig({ ... }) (it checks the keys and fills in the defaults), or leave config out to read berth.yaml');
  }
}
