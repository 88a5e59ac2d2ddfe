import { join } from 'node:path';
import type { BackendModule } from '../../src/backends/module.js';
import type { BackendTraits } from '../../src/config/backend-traits.js';
import { defineBackend } from '../../src/backends/module.js';
import { FakeBackend } from './fake-backend.js';
import type { FakeEngine } from './fake-engine.js';
import { FakeSnapshots } from './fake-snapshots.js';

/**
 * The fake backend as a module, on one fake engine. Its lifecycle is a container's (it names,
 * labels and lists its sandboxes, and their processes die with them) while its processes run on
 * this host in each sandbox's dir; so it keys like a container, and its paths are host paths.
 * It keeps snapshots (copies of a sandbox's dir) unless made with `snapshots: false`.
 * Registered by tests the way a new backend's line in registry.ts would be:
 * `BUILTIN_BACKENDS.with(fakeModule(engine))`.
 */
export function fakeModule(engine: FakeEngine, opts: { name?: string; traits?: Partial<BackendTraits>; snapshots?: boolean } = {}): BackendModule {
  const name = opts.name ?? 'fake';
  return defineBackend({
    name,
    traits: {
      mountsHostDirs: false,
      isolation: 'none',
      jobsDieWithSandbox: true,
      listsByLabel: true,
      containerKeying: true,
      hostPaths: true,
      // Its processes share the host's process table: the warden may never kill them all.
      ownsProcessTable: false,
      ...opts.traits,
    },
    // An image picks nothing on a fake engine, but a task override may name one (auto row 1).
    images: { of: () => 'fake-image', with: (s) => s },
    words: {
      where: (b) => `Commands run in a fake sandbox (sandbox "${b.sandboxKey}"), starting in ${b.cwd}.`,
      persistence: (b) => (b.persistent ? 'Fake files persist.' : 'Fake files vanish when this session closes.'),
    },
    defaultCwd: ({ berthHome, dirName }) => join(berthHome, 'sandboxes', name, dirName),
    create: async (ctx) => {
      const root = join(ctx.berthHome, 'sandboxes', name);
      const snapshots = opts.snapshots === false ? undefined : new FakeSnapshots(engine, ctx.installation, root, join(ctx.berthHome, 'snapshots', name));
      return new FakeBackend(name, engine, ctx.installation, root, ctx.log, snapshots);
    },
  }) as BackendModule;
}
