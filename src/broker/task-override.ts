import { z } from 'zod';
import { sectionOf, withSection, type BackendModule } from '../backends/module.js';
import { BACKEND_NAMES } from '../backends/registry.js';
import { PolicyRefusedError } from '../errors.js';
import type { CallScope } from '../scope/call-scope.js';
import type { BerthConfig, ProfileSettings } from '../setup/berth-config.js';
import type { ScopeRecords } from './state/scope-records.js';

/** Per-task settings an operator may set through the library or server API (design §3). */
export const TaskOverrideSchema = z.strictObject({
  image: z.string().min(1).max(256).optional(),
  backend: z.enum(BACKEND_NAMES).optional(),
  cwd: z.string().min(1).max(4096).optional(),
  cwdSource: z.enum(['session', 'process']).optional(),
});

export type TaskOverride = z.infer<typeof TaskOverrideSchema>;

/** An image or backend override gives the task its own sandbox (auto row 1); a cwd does not. */
export function overrideIsolates(o: TaskOverride | undefined): boolean {
  return o !== undefined && (o.image !== undefined || o.backend !== undefined);
}

export function readTaskOverride(scopes: Pick<ScopeRecords, 'taskOverride'>, scope: CallScope): TaskOverride | undefined {
  if (scope.task === undefined) return undefined;
  const raw = scopes.taskOverride(scope.tenant, scope.profile, scope.task);
  return raw === undefined ? undefined : TaskOverrideSchema.parse(raw);
}

/**
 * Which backends a task override may name for a profile: its own, or another the config uses;
 * never one without isolation (the host) unless the profile already runs there.
 */
function allowedOverrideBackends(config: BerthConfig, settings: ProfileSettings): Set<string> {
  const used = new Set<string>([config.base.backend, ...Object.values(config.profiles).map((p) => p.backend)]);
  for (const name of used) {
    if (config.backends.traits(name).isolation === 'none' && name !== settings.backend) used.delete(name);
  }
  used.add(settings.backend);
  return used;
}

/**
 * The profile's settings with a task override's backend and image applied. An image needs a
 * backend whose sandboxes run one.
 */
export function overriddenSettings(config: BerthConfig, base: ProfileSettings, scope: CallScope, override: TaskOverride): ProfileSettings {
  if (override.backend !== undefined && !allowedOverrideBackends(config, base).has(override.backend)) {
    throw new PolicyRefusedError(`task "${scope.task}" asks for backend "${override.backend}", which profile "${scope.profile}" does not allow; use "${base.backend}"`);
  }
  const backend = override.backend ?? base.backend;
  // The profile's egress holds on the task's backend too, or the task is refused (never an open network by override).
  const modes = config.backends.traits(backend).egressModes ?? ['open'];
  if (!modes.includes(base.egress.mode) || (base.credentials.length > 0 && !modes.includes('allowlist'))) {
    throw new PolicyRefusedError(
      `task "${scope.task}" asks for backend "${backend}", which cannot enforce profile "${scope.profile}"'s egress (mode ${base.egress.mode}` +
        `${base.credentials.length > 0 ? ', with credentials' : ''}); use "${base.backend}"`,
    );
  }
  const settings: ProfileSettings = { ...base, backend };
  if (override.image === undefined) return settings;
  const module: BackendModule = config.backends.module(backend);
  if (module.images === undefined) {
    const withImages = config.backends.namesWhere((_, m) => m.images !== undefined);
    throw new PolicyRefusedError(
      `task "${scope.task}" sets image "${override.image}", but backend "${backend}" runs no images (${withImages.length > 0 ? `only ${withImages.length === 1 ? `${withImages[0]} does` : `${withImages.slice(0, -1).join(', ')} and ${withImages.at(-1)} do`}` : 'no backend here does'}); ` +
        'remove the image from the task override, or give the task a backend that runs images',
    );
  }
  return withSection(settings, module, module.images.with(sectionOf(module, settings), override.image));
}
