import { chownSync, existsSync, mkdirSync, statSync } from 'node:fs';

import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/setup/parse-config.js';
import { ConfigError } from '../../src/errors.js';
import { assertHostBindsAllowed } from '../../src/policy/volumes.js';
import type { BerthConfig } from '../../src/setup/berth-config.js';
import { hostBindsOf } from '../../src/setup/host-binds.js';
import { tempDir } from '../helpers/temp-dir.js';

/** The start-up check the broker makes: each place's host binds, by their config keys. */
function assertVolumes(config: BerthConfig, ctx: Parameters<typeof assertHostBindsAllowed>[1]): void {
  assertHostBindsAllowed(hostBindsOf(config), ctx);
}

function fakeHome(): { home: string; state: string; project: string } {
  const root = tempDir('berth-vol-');
  const home = join(root, 'home');
  mkdirSync(join(home, '.ssh'), { recursive: true });
  mkdirSync(join(home, 'project'), { recursive: true });
  // A project an unprivileged user owns (as it would be on a real host; tests run as root here).
  if (process.getuid?.() === 0) chownSync(join(home, 'project'), 1000, 1000);
  return { home, state: join(home, '.berth'), project: join(home, 'project') };
}

describe('docker.volumes go through the credential-surface refusals at start-up', () => {
  it('refuses ~/.ssh, the home dir itself and a docker socket dir, naming the key and entry; allows a project dir', () => {
    const h = fakeHome();
    const ctx = { homeDir: h.home, stateDir: h.state, dockerSockets: ['/var/run/docker.sock'] };
    const check = (volumes: string[], profiles?: Record<string, unknown>) =>
      assertVolumes(parseConfig({ backend: 'docker', docker: { volumes }, ...(profiles ? { profiles } : {}) }), ctx);
    expect(() => check([`${h.project}:/data`])).not.toThrow();
    expect(() => check([`${h.home}/.ssh:/keys:ro`])).toThrow(ConfigError);
    expect(() => check([`${h.home}/.ssh:/keys:ro`])).toThrow(/docker\.volumes entry ".*\.ssh:\/keys:ro"/);
    expect(() => check([`${h.home}:/h`])).toThrow(/home/);
    expect(() => check(['/var/run:/run-host'])).toThrow(/docker/);
    expect(() => check([`${h.home}/nope:/x`])).toThrow(/does not exist/);
    expect(() => check([], { bot: { docker: { volumes: [`${h.home}/.ssh:/k`] } } })).toThrow(/profiles\.bot\.docker\.volumes/);
  });

  it.each(['/etc', '/usr', '/var/lib', '/run', '/proc', '/sys', '/dev', '/home'])('refuses the system path %s as a volume, naming the rule and the fix', (dir) => {
    const h = fakeHome();
    const ctx = { homeDir: h.home, stateDir: h.state, dockerSockets: [] };
    const check = () => assertVolumes(parseConfig({ backend: 'docker', docker: { volumes: [`${dir}:/host`] } }), ctx);
    expect(check).toThrow(ConfigError);
    expect(check).toThrow(new RegExp(`docker\\.volumes entry "${dir}:/host": ${dir} (is|contains) .*; bind a project folder instead`));
  });

  it('refuses a read-write volume owned by root at start-up (a sandbox would plant set-uid-root files there); read-only is fine', () => {
    const h = fakeHome();
    const rootOwned = join(h.home, 'root-owned');
    mkdirSync(rootOwned);
    if (statSync(rootOwned).uid !== 0) return void expect.soft(process.getuid?.(), 'needs root to make a root-owned dir').toBe(0);
    const ctx = { homeDir: h.home, stateDir: h.state, dockerSockets: [] };
    const check = (v: string | object) => () => assertVolumes(parseConfig({ backend: 'docker', docker: { volumes: [v] } }), ctx);
    expect(check(`${rootOwned}:/data`)).toThrow(ConfigError);
    expect(check(`${rootOwned}:/data`)).toThrow(
      `docker.volumes entry "${rootOwned}:/data": ${rootOwned} is owned by root and bound read-write, so a sandbox would write there as root ` +
        `and could leave a set-uid-root program any host user can run; hand it to an unprivileged owner (chown -R <uid>:<gid> ${rootOwned}: ` +
        `the sandbox then runs as that uid) or bind it read-only (${rootOwned}:<target>:ro)`,
    );
    expect(check({ source: rootOwned, target: '/data', tenants: '*' })).toThrow(/is owned by root and bound read-write/);
    expect(check(`${rootOwned}:/data:ro`)).not.toThrow();
    expect(check(`${h.project}:/data`)).not.toThrow();
  });

  it('refuses what lies inside a system directory (/var/lib/dpkg) and allows a project under /tmp', () => {
    const h = fakeHome();
    const ctx = { homeDir: h.home, stateDir: h.state, dockerSockets: [] };
    const check = (v: string) => () => assertVolumes(parseConfig({ backend: 'docker', docker: { volumes: [v] } }), ctx);
    if (existsSync('/var/lib/dpkg')) expect(check('/var/lib/dpkg:/x')).toThrow(/is inside \/var\/lib, a system directory berth never exposes to a sandbox/);
    expect(check(`${h.project}:/x`)).not.toThrow();
  });
});
