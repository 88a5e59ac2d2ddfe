import { mkdirSync } from 'node:fs';

import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config/schema.js';
import { ConfigError } from '../../src/errors.js';
import { assertVolumesAllowed } from '../../src/policy/volumes.js';
import { tempDir } from '../helpers/temp-dir.js';

function fakeHome(): { home: string; state: string; project: string } {
  const root = tempDir('berth-vol-');
  const home = join(root, 'home');
  mkdirSync(join(home, '.ssh'), { recursive: true });
  mkdirSync(join(home, 'project'), { recursive: true });
  return { home, state: join(home, '.berth'), project: join(home, 'project') };
}

describe('docker.volumes go through the credential-surface refusals at start-up', () => {
  it('refuses ~/.ssh, the home dir itself and a docker socket dir, naming the key and entry; allows a project dir', () => {
    const h = fakeHome();
    const ctx = { homeDir: h.home, stateDir: h.state, dockerSockets: ['/var/run/docker.sock'] };
    const check = (volumes: string[], profiles?: Record<string, unknown>) =>
      assertVolumesAllowed(parseConfig({ backend: 'docker', docker: { volumes }, ...(profiles ? { profiles } : {}) }), ctx);
    expect(() => check([`${h.project}:/data`])).not.toThrow();
    expect(() => check([`${h.home}/.ssh:/keys:ro`])).toThrow(ConfigError);
    expect(() => check([`${h.home}/.ssh:/keys:ro`])).toThrow(/docker\.volumes entry ".*\.ssh:\/keys:ro"/);
    expect(() => check([`${h.home}:/h`])).toThrow(/home/);
    expect(() => check(['/var/run:/run-host'])).toThrow(/docker/);
    expect(() => check([`${h.home}/nope:/x`])).toThrow(/does not exist/);
    expect(() => check([], { bot: { docker: { volumes: [`${h.home}/.ssh:/k`] } } })).toThrow(/profiles\.bot\.docker\.volumes/);
  });
});
