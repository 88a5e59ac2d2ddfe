import { homedir } from 'node:os';
import { describe, expect, it } from 'vitest';
import { CallResolver } from '../../src/broker/call-resolver.js';
import { StateStore } from '../../src/broker/state/state-store.js';
import { parseConfig } from '../../src/setup/parse-config.js';
import { tempDir } from '../helpers/temp-dir.js';

/*
 * The exec path keeps the resolution of a call that reads only the config and its scope (no task,
 * no workspace). These pin what that may and may not change: the same answer as a fresh
 * resolution, nothing shared across tenants, users or profiles, frozen, and tasks (whose aliases
 * and overrides live in the store) resolved afresh every time.
 */
function setup() {
  const home = tempDir('berth-memo-');
  const store = StateStore.open(home);
  const config = parseConfig({
    backend: 'local',
    env: { forward: ['GH_TOKEN'], perUserPrefix: 'BERTH_USER' },
    profiles: { other: { backend: 'local' } },
  });
  const hostEnv = Object.freeze({ GH_TOKEN: 'global-token', BERTH_USER__acme_TELEGRAM_1_GH_TOKEN: 'ana-token-1', BERTH_USER__acme_TELEGRAM_2_GH_TOKEN: 'bob-token-2' });
  const resolver = new CallResolver({ config, store, berthHome: home, homeDir: homedir(), dockerSockets: [], hostEnv, secrets: new Map() }, undefined);
  return { store, resolver };
}

const EXEC = { withCwd: false };

describe('the resolution the exec path keeps', () => {
  it('answers a session call again with the same frozen resolution, equal to a fresh one', () => {
    const { store, resolver } = setup();
    try {
      const a = resolver.resolve({ tenant: 'acme', session: 's1' }, EXEC);
      const b = resolver.resolve({ tenant: 'acme', session: 's1' }, EXEC);
      expect(b).toBe(a);
      expect(Object.isFrozen(a) && Object.isFrozen(a.binding) && Object.isFrozen(a.env) && Object.isFrozen(a.spec)).toBe(true);
      expect(() => {
        (a.env as Record<string, string>)['X'] = 'y';
      }).toThrow(TypeError);
      // explain (withCwd) is never served from it, and gives the same answer.
      const fresh = resolver.resolve({ tenant: 'acme', session: 's1' });
      expect(fresh).not.toBe(a);
      expect({ ...fresh.binding, cwd: '' }).toEqual(a.binding);
      expect(fresh.spec.digest).toBe(a.spec.digest);
    } finally {
      store.close();
    }
  });

  it('never hands one tenant, user or profile the resolution of another', () => {
    const { store, resolver } = setup();
    try {
      const ana = resolver.resolve({ tenant: 'acme', user: 'telegram:1' }, EXEC);
      const bob = resolver.resolve({ tenant: 'acme', user: 'telegram:2' }, EXEC);
      const otherTenant = resolver.resolve({ tenant: 'globex', user: 'telegram:1' }, EXEC);
      const otherProfile = resolver.resolve({ tenant: 'acme', user: 'telegram:1', profile: 'other' }, EXEC);
      expect(ana.env['GH_TOKEN']).toBe('ana-token-1');
      expect(bob.env['GH_TOKEN']).toBe('bob-token-2');
      expect(otherTenant.env['GH_TOKEN']).not.toBe('ana-token-1');
      expect(new Set([ana.spec.digest, bob.spec.digest, otherTenant.spec.digest, otherProfile.spec.digest]).size).toBe(4);
      // Asked again, each still gets its own.
      expect(resolver.resolve({ tenant: 'acme', user: 'telegram:2' }, EXEC).env['GH_TOKEN']).toBe('bob-token-2');
      expect(resolver.resolve({ tenant: 'acme', user: 'telegram:1' }, EXEC)).toBe(ana);
    } finally {
      store.close();
    }
  });

  it('resolves a task afresh on every call: an alias registered later changes its sandbox at once', () => {
    const { store, resolver } = setup();
    try {
      const before = resolver.resolve({ tenant: 'acme', session: 's1', task: 'child' }, EXEC);
      expect(resolver.resolve({ tenant: 'acme', session: 's1', task: 'child' }, EXEC)).not.toBe(before);
      // `--parent` registers child -> parent (as another process could): the next call sees it.
      resolver.resolve({ tenant: 'acme', session: 's1', task: 'child', parentTask: 'parent' }, EXEC);
      const after = resolver.resolve({ tenant: 'acme', session: 's1', task: 'child' }, EXEC);
      expect(after.isSubagent).toBe(true);
      expect(before.isSubagent).toBe(false);
    } finally {
      store.close();
    }
  });
});
