import { bwrapModule } from './bwrap/module.js';
import { BackendCatalog } from './catalog.js';
import { dockerModule } from './docker/module.js';
import { kubernetesModule } from './kubernetes/module.js';
import { localModule } from './local/module.js';
import type { SectionOf } from './module.js';
import { sshModule } from './ssh/module.js';

/**
 * Every backend berth ships, one line each. A module declares its traits, settings section,
 * default cwd and a lazy factory (importing this file loads no engine client).
 */
const BACKEND_MODULES = [
  dockerModule,
  localModule,
  sshModule,
  bwrapModule,
  kubernetesModule,
] as const;

/** The registry as a catalog: what a config is parsed against unless a test adds modules. */
export const BUILTIN_BACKENDS = new BackendCatalog(BACKEND_MODULES);

type BuiltinModule = (typeof BACKEND_MODULES)[number];

/** A backend's name, as configs write it. */
export type BackendName = BuiltinModule['name'];

export const BACKEND_NAMES = BACKEND_MODULES.map((m) => m.name) as [BackendName, ...BackendName[]];

export type { DockerSettings } from './docker/settings.js';

/** Each module's settings section by its name (`docker: DockerSettings`), for modules that have one. */
export type BackendSections = {
  [M in BuiltinModule as SectionOf<M> extends undefined ? never : M['name']]: SectionOf<M>;
};

/** The backend a config that names none uses (design §2: never the host by default). */
export const DEFAULT_BACKEND: BackendName = 'docker';
