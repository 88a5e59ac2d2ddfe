import type * as z from 'zod';
import type { EgressMode } from '../egress/policy.js';

/*
 * A backend module's own config section (`docker:`): what it adds to the schema, its defaults, how
 * a profile's keys merge over the top level's, and its own rules. Each backend's settings.ts
 * writes one with the config kit (zod-kit.ts, `mergeWritten`); setup/ composes them into the config.
 */

/** An operator's host dir that a section binds into sandboxes (checked against the credential surfaces at start-up). */
export interface SectionHostBind {
  source: string;
  /** The key under the section that names it (`volumes`). */
  key: string;
  /** The entry as the operator wrote it, for messages. */
  describe: string;
  /** Bound read-only: the sandbox cannot write there, so its owner does not matter. */
  readOnly: boolean;
}

/** The written form of a section: zod's output of its strict object. */
export type WrittenSection<Shape extends z.core.$ZodLooseShape> = z.output<z.ZodObject<Shape, z.core.$strict>>;

/**
 * A module's own config section (`docker:`), at the top level and in every profile. Its keys are
 * all optional and without defaults (so a written value is told from a default); `defaults` and
 * `merge` build the settings the backend reads.
 */
export interface SettingsSection<S, Shape extends z.core.$ZodLooseShape = z.core.$ZodLooseShape> {
  shape: Shape;
  defaults(): S;
  /** `base` (the top level's, or the defaults) with what one section wrote over it (`mergeWritten`). */
  merge(base: S, written: WrittenSection<Shape>): S;
  /** Host dirs the operator binds through this section, for the start-up refusals (`docker.volumes`). */
  hostBinds?(settings: S): readonly SectionHostBind[];
  /**
   * Keys that hold for the whole installation (where its sandboxes live, which uids they get): a
   * profile that writes one with another value than the top level's is a config error.
   */
  installationWide?: readonly (keyof Shape & string)[];
  /**
   * The module's own cross-field rules, as messages naming the key and the fix: judged once over
   * every place of the config whose backend is this module (top level and profiles), so a rule
   * may also compare them (one cluster per installation, say). A profile that wrote none of the
   * keys involved repeats the top level's values and is left to the top level.
   */
  problems?(uses: readonly SectionUse<S>[]): string[];
}

/** One place of the config that uses a module, with its merged section, for `SettingsSection.problems`. */
export interface SectionUse<S> {
  /** The section's config path (`kubernetes`, `profiles.bot.kubernetes`). */
  at: string;
  settings: S;
  /** The place's `persistent` setting. */
  persistent: boolean;
  /** The place's `egress.mode`, and whether berth's proxy serves it (allowlist, or credentials). */
  egress: { mode: EgressMode; proxied: boolean };
}

/** How written keys that are not taken as they are become settings: each from what was written and the base's value. */
export type SectionConversions<S, W> = { readonly [K in keyof S & keyof W]?: (written: NonNullable<W[K]>, base: S[K]) => S[K] };

/**
 * `base` with every key `written` sets over it, the one merge of every section: a written value
 * replaces the base's whole (a list or a mapping is never merged entry by entry), an unwritten key
 * keeps the base's. A key whose written form is not its settings form is converted by
 * `conversions` (`docker.volumes` entries), and the result is frozen.
 *
 * @example
 * mergeWritten({ image: 'a', network: 'bridge' }, { image: 'b' }) // { image: 'b', network: 'bridge' }
 */
export function mergeWritten<S extends object, W extends object>(base: S, written: W, conversions: SectionConversions<S, W> = {}): S {
  const merged: Record<string, unknown> = {};
  for (const key of Object.keys(base) as (keyof S & string)[]) {
    const value = (written as Record<string, unknown>)[key];
    const convert = (conversions as Record<string, ((w: unknown, b: unknown) => unknown) | undefined>)[key];
    merged[key] = value === undefined ? base[key] : convert === undefined ? value : convert(value, base[key]);
  }
  return Object.freeze(merged) as S;
}
