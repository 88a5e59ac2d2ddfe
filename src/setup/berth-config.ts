import type { BackendCatalog } from '../backends/catalog.js';
import type { BackendSections } from '../backends/registry.js';
import type { AuditSettings, ConfigPlaces, CoreSettings, EgressProxySettings, ServerSettings, TenantLimits } from '../config/types.js';

/**
 * Everything a profile may override, merged: berth's own keys plus each backend module's section
 * under its name (`docker`), typed here from the registry's modules; `settingsFor(config, profile)`
 * returns it. A backend reads only its own section (`SandboxSpec.section`).
 */
export type ProfileSettings = CoreSettings & BackendSections;

/** The validated, immutable shape of berth's configuration. Built only by `loadConfig`/`parseConfig`. */
export interface BerthConfig extends ConfigPlaces<ProfileSettings> {
  readonly multiProfile: boolean;
  readonly server: ServerSettings;
  readonly limits: TenantLimits;
  readonly audit: AuditSettings;
  readonly egressProxy: EgressProxySettings;
  /** Where the config came from (a path), or undefined for built-in defaults. */
  readonly source: string | undefined;
  /** The backend modules this config was parsed against: their traits answer what a backend does. */
  readonly backends: BackendCatalog;
}
