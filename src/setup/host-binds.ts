import { sectionOf } from '../backends/module.js';
import type { PlacedHostBind } from '../policy/volumes.js';
import type { BerthConfig } from './berth-config.js';

/**
 * The host dirs the operator binds through the backend sections of each place of `config` that
 * uses the backend (`docker.volumes`), each named by its config key, for the start-up refusals
 * (`assertHostBindsAllowed`).
 */
export function hostBindsOf(config: BerthConfig): PlacedHostBind[] {
  const places = [[undefined, config.base] as const, ...Object.entries(config.profiles)];
  return places.flatMap(([profile, settings]) => {
    const module = config.backends.module(settings.backend);
    const binds = module.settings?.hostBinds?.(sectionOf(module, settings)) ?? [];
    return binds.map((bind) => ({ key: `${profile === undefined ? '' : `profiles.${profile}.`}${module.name}.${bind.key}`, bind }));
  });
}
