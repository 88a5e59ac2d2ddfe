import { keyOf, type Section } from '../config/cross-field-rules.js';
import type { BackendCatalog } from '../backends/catalog.js';
import { sectionOf } from '../backends/module.js';
import type { ProfileSettings } from './berth-config.js';

/*
 * The rules of the backend modules' own sections, judged over every place of the config: a
 * section no place it applies to uses, an installation-wide key a profile changes, and each
 * module's own rules (`SettingsSection.problems`).
 */

type Place = Section<ProfileSettings>;

/**
 * A `<module>:` section where no profile it applies to uses that module. A top-level section
 * applies to the top level (profiles without one) and to every profile.
 */
function unusedSectionProblems(top: Place, profiles: readonly Place[], backends: BackendCatalog): string[] {
  const problems: string[] = [];
  const sectioned = backends.modules.filter((m) => m.settings !== undefined).map((m) => m.name);
  for (const name of sectioned) {
    if (top.written[name] !== undefined && ![top, ...profiles].some((s) => s.settings.backend === name)) {
      problems.push(`config key "${name}": no profile uses backend ${name}, so the ${name} section would have no effect; remove it or set backend: ${name}`);
    }
  }
  for (const p of profiles) {
    const backend = p.settings.backend;
    for (const name of sectioned) {
      if (p.written[name] !== undefined && backend !== name) {
        problems.push(
          `config key "${keyOf(p, name)}": profile "${p.profile}" uses backend "${backend}", so its ${name} section would have no effect; remove it or set ${keyOf(p, 'backend')}: ${name}`,
        );
      }
    }
  }
  return problems;
}

/**
 * A module's installation-wide keys (where its sandboxes live, which uids they get) written in a
 * profile with another value than the top level's: two profiles would keep one installation's
 * sandboxes apart in ways its reapers and uid claims do not know about.
 */
function installationWideProblems(top: Place, profiles: readonly Place[], backends: BackendCatalog): string[] {
  const problems: string[] = [];
  for (const m of backends.modules) {
    for (const key of m.settings?.installationWide ?? []) {
      const topValue = JSON.stringify((sectionOf(m, top.settings) as Record<string, unknown>)[key]);
      for (const p of profiles) {
        const written = (p.written as Record<string, Record<string, unknown> | undefined>)[m.name]?.[key];
        const value = JSON.stringify((sectionOf(m, p.settings) as Record<string, unknown>)[key]);
        if (written === undefined || value === topValue) continue;
        problems.push(
          `config key "${keyOf(p, `${m.name}.${key}`)}": ${m.name}.${key} holds for the whole installation, and profile "${p.profile}" sets it ` +
            `to ${value} where the top level has ${topValue}; set ${m.name}.${key} at the top level only`,
        );
      }
    }
  }
  return problems;
}

/**
 * Each module's own rules (`SettingsSection.problems`) over the places that use it. A profile that
 * wrote none of the keys involved repeats the top level's values and is left to the top level.
 */
function moduleProblems(top: Place, profiles: readonly Place[], backends: BackendCatalog): string[] {
  const problems: string[] = [];
  for (const m of backends.modules) {
    if (m.settings?.problems === undefined) continue;
    const uses = [top, ...profiles]
      .filter((s) => s.settings.backend === m.name && (s.profile === undefined ||
        [m.name, 'backend', 'persistent', 'egress', 'credentials'].some((k) => (s.written as Record<string, unknown>)[k] !== undefined)))
      .map((s) => ({
        at: keyOf(s, m.name), settings: sectionOf(m, s.settings), persistent: s.settings.persistent,
        egress: { mode: s.settings.egress.mode, proxied: s.settings.egress.mode === 'allowlist' || s.settings.credentials.length > 0 },
      }));
    if (uses.length > 0) problems.push(...m.settings.problems(uses));
  }
  return problems;
}

/** Every problem of the modules' sections, in a stable order. */
export function sectionProblems(top: Place, profiles: readonly Place[], backends: BackendCatalog): string[] {
  return [...unusedSectionProblems(top, profiles, backends), ...installationWideProblems(top, profiles, backends), ...moduleProblems(top, profiles, backends)];
}
