import type { BackendTraits, BackendTraitsTable } from '../config/backend-traits.js';
import { BerthError, ConfigError } from '../errors.js';
import type { BackendModule } from './module.js';

const MODULE_NAME = /^[a-z][a-z0-9-]{0,31}$/;

/**
 * The backend modules one installation knows, by name: the registry's (`backends/registry.ts`),
 * or those plus more a test registers (`BUILTIN_BACKENDS.with(fakeModule)`). Immutable: `with`
 * returns a new catalog. The config schema is composed from it, and a parsed config carries it.
 */
export class BackendCatalog implements BackendTraitsTable {
  private readonly byName: ReadonlyMap<string, BackendModule>;

  constructor(readonly modules: readonly BackendModule[]) {
    const byName = new Map<string, BackendModule>();
    for (const m of modules) {
      if (!MODULE_NAME.test(m.name)) throw new BerthError('internal', `backend module name "${m.name}" must match ${MODULE_NAME}`);
      if (byName.has(m.name)) throw new BerthError('internal', `two backend modules are named "${m.name}"`);
      byName.set(m.name, m);
    }
    if (byName.size === 0) throw new BerthError('internal', 'a backend catalog needs at least one module');
    this.byName = byName;
  }

  /** Module names in registry order (the order config messages list them in). */
  get names(): [string, ...string[]] {
    return this.modules.map((m) => m.name) as [string, ...string[]];
  }

  has(name: string): boolean {
    return this.byName.has(name);
  }

  /** The module of `name`; a name the catalog does not know is a config error naming the known ones. */
  module(name: string): BackendModule {
    const m = this.byName.get(name);
    if (m === undefined) {
      throw new ConfigError(`backend "${name}" is not one of ${this.names.map((n) => `"${n}"`).join(', ')}; set backend to one of them`);
    }
    return m;
  }

  traits(name: string): Readonly<BackendTraits> {
    return this.module(name).traits;
  }

  /** Names of the modules whose traits pass `test`, in registry order. */
  namesWhere(test: (traits: Readonly<BackendTraits>, module: BackendModule) => boolean): string[] {
    return this.modules.filter((m) => test(m.traits, m)).map((m) => m.name);
  }

  /** This catalog plus `more` (a test's fake backend, say). */
  with(...more: readonly BackendModule[]): BackendCatalog {
    return new BackendCatalog([...this.modules, ...more]);
  }
}
