import * as z from 'zod';
import { coreKnownKeys, coreProfileShape, PROFILE_NAME, topOnlyShape, type RawConfig } from '../config/core-schema.js';
import type { KnownKeys } from '../config/issue-messages.js';
import { FULL, section } from '../config/zod-kit.js';
import type { BackendCatalog } from '../backends/catalog.js';
import type { BackendModule } from '../backends/module.js';
import { BerthError } from '../errors.js';

/*
 * The config schema, composed from berth's own keys (config/core-schema.ts) and one section per
 * backend module that has settings (`docker:`): a module's section appears in the schema (top
 * level and every profile) by adding the module to the catalog.
 */

/** The schema for one catalog of backend modules, with what the error messages need. */
export interface ComposedSchema {
  schema: z.ZodType<RawConfig>;
  knownKeys: KnownKeys;
  /** The modules that have a config section, in registry order. */
  sections: readonly BackendModule[];
}

/**
 * The config schema for `catalog`: berth's keys plus `<module>:` for each module with settings.
 *
 * @throws BerthError (internal) when a module's section name collides with one of berth's keys.
 */
export function composeSchema(catalog: BackendCatalog): ComposedSchema {
  const core = coreProfileShape(catalog.names);
  const sections = catalog.modules.filter((m) => m.settings !== undefined);
  const taken = new Set<string>([...Object.keys(core), ...Object.keys(topOnlyShape), 'profiles']);
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
  const topShape = { ...profileShape, ...topOnlyShape, profiles: profilesSchema };
  const schema = z.strictObject(topShape, { error: 'a mapping of config keys' }) as unknown as z.ZodType<RawConfig>;
  const knownKeys: KnownKeys = {
    top: Object.keys(topShape),
    profile: Object.keys(profileShape),
    ...coreKnownKeys,
    ...Object.fromEntries(sections.map((m) => [m.name, Object.keys(m.settings!.shape)])),
  };
  return { schema, knownKeys, sections };
}
