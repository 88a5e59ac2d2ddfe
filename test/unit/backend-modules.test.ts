import { mkdtempSync, realpathSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as z from 'zod';
import { afterEach, describe, expect, it } from 'vitest';
import { BackendCatalog } from '../../src/backends/catalog.js';
import { defineBackend, sectionOf, type BackendModule } from '../../src/backends/module.js';
import type { BackendTraits } from '../../src/config/backend-traits.js';
import { BUILTIN_BACKENDS } from '../../src/backends/registry.js';
import { hostGroupsUnusable } from '../../src/backends/cgroups/cgroup-host.js';
import { Broker } from '../../src/broker/broker.js';
import { formatEffectiveConfig } from '../../src/setup/format-config.js';
import { parseConfig } from '../../src/setup/parse-config.js';
import { settingsFor } from '../../src/config/types.js';
import { BerthError, ConfigError, PolicyRefusedError } from '../../src/errors.js';
import { configErrorOf } from '../helpers/config-problem.js';

/*
 * A backend is a module: its traits, settings section and default cwd reach config validation,
 * `explain` and the tool descriptions without any code outside src/backends/ naming it. These
 * modules exist only here, added to the registry's catalog the way a new backend's line would be.
 */

const REMOTE: BackendTraits = {
  mountsHostDirs: false, isolation: 'remote', jobsDieWithSandbox: true, listsByLabel: false,
  containerKeying: false, hostPaths: false, ownsProcessTable: false,
};

interface ExampleSettings { size: number; host: string | undefined }

/** A remote-like backend with its own `example:` section. */
const exampleShape = { size: z.number({ error: 'a number' }).optional(), host: z.string({ error: 'a host name' }).optional() };
const example = defineBackend<'example', ExampleSettings, typeof exampleShape>({
  name: 'example',
  traits: REMOTE,
  settings: {
    shape: exampleShape,
    defaults: () => ({ size: 1, host: undefined }),
    merge: (base, w) => ({ size: w.size ?? base.size, host: w.host ?? base.host }),
  },
  words: {
    where: (b) => `Commands run on an example host, in ${b.cwd}.`,
    persistence: (b) => (b.persistent ? 'Example files persist.' : 'Example files vanish.'),
  },
  defaultCwd: ({ dirName }) => `/home/${dirName}`,
  create: async () => {
    throw new BerthError('internal', 'the example backend is never created in these tests');
  },
});

/** A namespace backend that mounts and keys like a container, without a section. */
const boxes = defineBackend({
  name: 'boxes',
  traits: { ...REMOTE, isolation: 'namespace', mountsHostDirs: true, containerKeying: true, ownsProcessTable: true },
  words: { where: () => 'In a box.', persistence: () => 'Box files persist.' },
  defaultCwd: () => '/workspace',
  create: async () => {
    throw new BerthError('internal', 'never created');
  },
});

const catalog = BUILTIN_BACKENDS.with(example as BackendModule, boxes as BackendModule);

const errorOf = (raw: unknown, backends = catalog): string => configErrorOf(raw, { backends });

describe('the registry as a catalog of modules', () => {
  it('lists the built-in backends in registry order, each with its traits', () => {
    expect(BUILTIN_BACKENDS.names).toEqual(['docker', 'local', 'ssh', 'bwrap', 'kubernetes']);
    expect(BUILTIN_BACKENDS.traits('kubernetes')).toMatchObject({ mountsHostDirs: false, isolation: 'container', containerKeying: true, listsByLabel: true, hostPaths: false });
    expect(BUILTIN_BACKENDS.traits('docker')).toMatchObject({ mountsHostDirs: true, isolation: 'container', containerKeying: true, listsByLabel: true });
    expect(BUILTIN_BACKENDS.traits('local')).toMatchObject({ mountsHostDirs: false, isolation: 'none', hostPaths: true, jobsDieWithSandbox: false });
    expect(BUILTIN_BACKENDS.traits('ssh')).toMatchObject({ containerKeying: false, isolation: 'remote', hostPaths: false });
    expect(BUILTIN_BACKENDS.traits('bwrap')).toMatchObject({
      mountsHostDirs: true, isolation: 'namespace', containerKeying: true, listsByLabel: true, jobsDieWithSandbox: true, ownsProcessTable: true, hostPaths: false,
    });
  });

  it('refuses two modules of one name, and names the known ones for an unknown name', () => {
    expect(() => BUILTIN_BACKENDS.with(example as BackendModule, example as BackendModule)).toThrow(/two backend modules are named "example"/);
    expect(() => catalog.module('podman')).toThrow(ConfigError);
    expect(() => catalog.module('podman')).toThrow('backend "podman" is not one of "docker", "local", "ssh", "bwrap", "kubernetes", "example", "boxes"');
    expect(() => new BackendCatalog([])).toThrow(/at least one module/);
  });

  it('a module cannot take one of berth\'s own config keys for its section', () => {
    const env = defineBackend({ ...example, name: 'env' } as BackendModule<'env', ExampleSettings>);
    expect(() => parseConfig({}, undefined, { backends: BUILTIN_BACKENDS.with(env as BackendModule) })).toThrow(/would take berth's own config key "env"/);
  });
});

describe('a module\'s settings section is part of the config schema', () => {
  it('appears at the top level and in profiles once the module is in the catalog, merged by the module', () => {
    const c = parseConfig({ backend: 'example', example: { size: 3 }, profiles: { big: { example: { host: 'h1' } } } }, undefined, { backends: catalog });
    expect(sectionOf(example, c.base)).toEqual({ size: 3, host: undefined });
    expect(sectionOf(example, settingsFor(c, 'big'))).toEqual({ size: 3, host: 'h1' });
    // Without the module, the same file is an unknown key (and an unknown backend).
    expect(() => parseConfig({ backend: 'local', example: { size: 3 } })).toThrow('unknown config key "example"');
  });

  it('validates the section strictly, with the module\'s own messages and "did you mean" from its keys', () => {
    expect(errorOf({ backend: 'example', example: { sise: 3 } })).toBe('unknown config key "example.sise"; did you mean "size"?');
    expect(errorOf({ backend: 'example', example: { size: 'big' } })).toBe('config key "example.size": expected a number, got "big"');
    expect(errorOf({ backend: 'podman' })).toBe('config key "backend": expected one of "docker", "local", "ssh", "bwrap", "kubernetes", "example", "boxes", got "podman"');
  });

  it('a section for a backend no profile uses is a config error naming the section', () => {
    expect(errorOf({ backend: 'docker', example: { size: 2 } })).toBe(
      'config key "example": no profile uses backend example, so the example section would have no effect; remove it or set backend: example',
    );
    expect(errorOf({ backend: 'example', profiles: { bot: { backend: 'local', example: { size: 2 } } } })).toBe(
      'config key "profiles.bot.example": profile "bot" uses backend "local", so its example section would have no effect; remove it or set profiles.bot.backend: example',
    );
  });

  it('config check shows the section of the profile\'s own backend only', () => {
    const out = formatEffectiveConfig(parseConfig({ backend: 'example', example: { size: 5 }, profiles: { d: { backend: 'docker' } } }, undefined, { backends: catalog }));
    expect(out).toMatch(/^example:\n {2}size: 5\n/m);
    expect(out).not.toMatch(/^docker:/m);
    expect(out).toMatch(/^ {4}docker:\n {6}image: berth-sandbox:latest/m);
  });
});

describe('config rules read traits, not names', () => {
  it('workspace.mount: the backends that never mount and those that do are listed from their traits', () => {
    expect(errorOf({ backend: 'example', workspace: { mount: true } })).toBe(
      'config key "workspace.mount": local, ssh, kubernetes and example never mount, and no profile it applies to uses a container backend; remove workspace.mount or use backend: docker, bwrap or boxes',
    );
    // A namespace backend that mounts host dirs may mount.
    expect(parseConfig({ backend: 'boxes', workspace: { mount: true } }, undefined, { backends: catalog }).base.workspace.mount).toBe(true);
  });

  it('sharedKey in scope auto applies to any persistent backend that keys like a container', () => {
    expect(parseConfig({ backend: 'boxes', persistent: true, sharedKey: 'team' }, undefined, { backends: catalog }).base.sharedKey).toBe('team');
    expect(errorOf({ backend: 'example', persistent: true, sharedKey: 'team' })).toContain(
      'only applies to a persistent container backend (docker, bwrap, kubernetes or boxes with persistent: true), and here backend "example" is not a container backend',
    );
  });
});

describe('explain and the tool words come from the module', () => {
  const homes: string[] = [];
  afterEach(() => {
    for (const h of homes.splice(0)) rmSync(h, { recursive: true, force: true });
  });
  const home = (): string => {
    const h = realpathSync(mkdtempSync(join(tmpdir(), 'berth-modules-')));
    homes.push(h);
    return h;
  };

  it('a backend that neither mounts nor runs on this host: isolation from its traits, an attached workspace unused, its own default cwd', async () => {
    const h = home();
    const ws = home();
    await using broker = await Broker.open({ config: parseConfig({ backend: 'example', persistent: false }, undefined, { backends: catalog }), berthHome: h, env: {} });
    const b = broker.explain({ session: 's1', workspace: { path: ws, source: 'session' } });
    expect(b).toMatchObject({ backend: 'example', isolation: 'remote', mount: null, sandboxKey: 'session:s1', rule: 'auto:5' });
    expect(b.mountReason).toBe('backend "example" neither mounts host dirs nor runs on this host, so the attached workspace is not used');
    expect(b.cwd).toMatch(/^\/home\/session_s1-[0-9a-f]{12}$/);
    expect(b.note).toBeUndefined();
  });

  it('says how a timeout ends a command\'s processes: the kernel\'s grouping where the module runs them on this host or groups them on its own, tags elsewhere', async () => {
    // As root on a host with cgroup2 (CI's), berth may group processes; elsewhere every backend says tags.
    const here = hostGroupsUnusable() === undefined ? 'cgroup' : 'tags';
    const kill = async (backend: string, env: Record<string, string> = {}, more: Record<string, unknown> = {}): Promise<string> => {
      await using broker = await Broker.open({ config: parseConfig({ backend, ...more }, undefined, { backends: catalog }), berthHome: home(), env });
      return broker.explain({ session: 's1' }).kill;
    };
    expect(await kill('local')).toBe(here);
    expect(await kill('bwrap')).toBe(here);
    expect(await kill('docker')).toBe(here);
    expect(await kill('docker', { DOCKER_HOST: 'unix:///run/user/1000/docker.sock' })).toBe(here);
    // An engine reached over TCP or SSH runs its containers on another machine.
    expect(await kill('docker', { DOCKER_HOST: 'tcp://build1:2376' })).toBe('tags');
    expect(await kill('docker', { DOCKER_HOST: 'ssh://ana@build1' })).toBe('tags');
    expect(await kill('example')).toBe('tags');
    // berth's root agent groups an SSH sandbox's commands on its host, which the probe requires.
    expect(await kill('ssh', {}, { ssh: { host: 'build1', agent: '/run/ssh-agent.sock' } })).toBe('cgroup');
  });

  it('keys like a container when its traits say so (design §3 row 7), whatever its name', async () => {
    await using broker = await Broker.open({ config: parseConfig({ backend: 'boxes', persistent: true }, undefined, { backends: catalog }), berthHome: home(), env: {} });
    expect(broker.explain({ session: 's1' })).toMatchObject({ sandboxKey: 'default', rule: 'auto:7', isolation: 'namespace' });
  });

  it('a task override that sets an image needs a backend whose module runs images', async () => {
    await using broker = await Broker.open({ config: parseConfig({ backend: 'local' }), berthHome: home(), env: {} });
    const err = (() => {
      try {
        broker.setTaskOverride({ session: 's', task: 't1' }, { image: 'example/other:1' });
      } catch (e) {
        return e;
      }
      return undefined;
    })();
    expect(err).toBeInstanceOf(PolicyRefusedError);
    expect((err as Error).message).toBe(
      'task "t1" sets image "example/other:1", but backend "local" runs no images (only docker and kubernetes do); remove the image from the task override, or give the task a backend that runs images',
    );
  });
});
