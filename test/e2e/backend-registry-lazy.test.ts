import { describe, expect, it } from 'vitest';
import { modulesLoadedBy } from '../helpers/loaded-modules.js';

/*
 * The registry lists every backend module, and a module's factory imports its implementation
 * only when called: importing the registry, and parsing and explaining a docker config, load no
 * engine or SSH client (built package, fresh node).
 */

const isEngineClient = (url: string): boolean => /\/node_modules\/(dockerode|docker-modem|ssh2|@kubernetes\/client-node)\//.test(url);

describe('the backend registry loads no engine client', () => {
  it('importing the registry and parsing a docker config loads neither dockerode, ssh2 nor the kubernetes client; creating the docker backend does', async () => {
    const script = `
      const { BUILTIN_BACKENDS } = await import('./dist/backends/registry.js');
      const { parseConfig } = await import('./dist/setup/parse-config.js');
      parseConfig({ backend: 'docker', docker: { image: 'x' }, profiles: { s: { backend: 'ssh', ssh: { host: 'h', identityFile: '/k' } } } });
      console.log(BUILTIN_BACKENDS.names.join(','));
      if (process.env.CREATE === '1') {
        const { Logger } = await import('./dist/logging/logger.js');
        await BUILTIN_BACKENDS.module('docker').create({ berthHome: '/nonexistent', installation: 'i', log: Logger.silent(), lease: (_n, fn) => fn(), places: [] });
      }`;
    const lazy = await modulesLoadedBy(['--input-type=module', '-e', script]);
    expect(lazy.stderr).toBe('');
    expect(lazy.stdout).toBe('docker,local,ssh,bwrap,kubernetes\n');
    expect(lazy.modules.some((u) => u.endsWith('/dist/backends/docker/module.js'))).toBe(true);
    expect(lazy.modules.filter(isEngineClient)).toEqual([]);
    expect(lazy.modules.some((u) => u.endsWith('/dist/backends/docker/docker-backend.js'))).toBe(false);
    expect(lazy.modules.some((u) => u.endsWith('/dist/backends/bwrap/module.js'))).toBe(true);
    expect(lazy.modules.some((u) => u.endsWith('/dist/backends/bwrap/bwrap-backend.js'))).toBe(false);

    // The same check sees dockerode once the factory runs.
    const created = await modulesLoadedBy(['--input-type=module', '-e', script], { ...process.env, CREATE: '1' });
    expect(created.stderr).toBe('');
    expect(created.modules.some((u) => u.includes('/node_modules/dockerode/'))).toBe(true);
  });
});
