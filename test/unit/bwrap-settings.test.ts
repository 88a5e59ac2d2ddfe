import { describe, expect, it } from 'vitest';
import { bwrapModule } from '../../src/backends/bwrap/module.js';
import { DEFAULT_UIDS } from '../../src/backends/bwrap/settings.js';
import { isolationNoteOf } from '../../src/backends/module.js';
import { parseConfig } from '../../src/setup/parse-config.js';
import { BUILTIN_BACKENDS } from '../../src/backends/registry.js';
import { Binding } from '../../src/server/response-schemas.js';
import { configErrorOf } from '../helpers/config-problem.js';

const errorOf = (raw: unknown): string => configErrorOf(raw);

describe('the bwrap: config section', () => {
  it('has defaults for every key: the filter on, no network, a uid range above the usual ones', () => {
    const c = parseConfig({ backend: 'bwrap' }, undefined);
    expect(c.base.bwrap).toEqual({ path: 'bwrap', root: undefined, uids: DEFAULT_UIDS, network: 'none', seccomp: true, tmpSizeMb: 256, maxProcesses: 1024 });
  });

  it('merges a profile over the top level', () => {
    const c = parseConfig({ backend: 'bwrap', bwrap: { network: 'host', tmpSizeMb: 64 }, profiles: { p: { bwrap: { network: 'none' } } } }, undefined);
    expect(c.profiles['p']!.bwrap).toMatchObject({ network: 'none', tmpSizeMb: 64 });
  });

  it('refuses unknown keys, bad values and a uid range among system accounts or over nobody', () => {
    expect(errorOf({ backend: 'bwrap', bwrap: { networks: 'none' } })).toMatch(/bwrap\.networks/);
    expect(errorOf({ backend: 'bwrap', bwrap: { network: 'bridge' } })).toMatch(/bwrap\.network.*one of "none", "host"/);
    expect(errorOf({ backend: 'bwrap', bwrap: { seccomp: 'off' } })).toMatch(/bwrap\.seccomp.*true or false/);
    expect(errorOf({ backend: 'bwrap', bwrap: { root: 'rel/dir' } })).toMatch(/bwrap\.root.*absolute path/);
    expect(errorOf({ backend: 'bwrap', bwrap: { path: '../bwrap' } })).toMatch(/bwrap\.path/);
    expect(errorOf({ backend: 'bwrap', bwrap: { uids: { first: 500, count: 10 } } })).toMatch(/bwrap\.uids.*among system accounts; start at 100000 or above/);
    expect(errorOf({ backend: 'bwrap', bwrap: { uids: { first: 60000, count: 10000 } } })).toMatch(/bwrap\.uids.*65534 \(nobody\)/);
    expect(errorOf({ backend: 'bwrap', bwrap: { uids: { first: 200000 } } })).toMatch(/bwrap\.uids\.count/);
  });

  it('a profile that moves the sandbox root or the uid range is a start-up error naming the fix', () => {
    expect(errorOf({ backend: 'bwrap', bwrap: { root: '/srv/a' }, profiles: { p: { bwrap: { root: '/srv/b' } } } }))
      .toMatch(/config key "profiles\.p\.bwrap\.root": bwrap\.root holds for the whole installation.*set bwrap\.root at the top level only/);
    expect(errorOf({ backend: 'bwrap', profiles: { p: { bwrap: { uids: { first: 300000, count: 10 } } } } }))
      .toMatch(/config key "profiles\.p\.bwrap\.uids": bwrap\.uids holds for the whole installation/);
    // The same value written again is no contradiction.
    expect(() => parseConfig({ backend: 'bwrap', bwrap: { root: '/srv/a' }, profiles: { p: { bwrap: { root: '/srv/a' } } } }, undefined)).not.toThrow();
  });

  it('a bwrap section no profile uses is an error, as for every module', () => {
    expect(errorOf({ backend: 'docker', bwrap: { network: 'host' } })).toMatch(/no profile uses backend bwrap/);
  });

  it('credentials on the host network are a start-up error (no namespace of its own for the proxy); allowlist and plain host network are not', () => {
    const cred = { GITHUB_TOKEN: { from: 'GITHUB_TOKEN', hosts: ['api.github.com'] } };
    expect(errorOf({ backend: 'bwrap', bwrap: { network: 'host' }, credentials: cred }))
      .toMatch(/config key "bwrap\.network": "host" shares this host's network namespace.*set network: none with egress\.mode: allowlist.*or remove the credentials/);
    expect(errorOf({ backend: 'bwrap', credentials: cred, profiles: { p: { bwrap: { network: 'host' } } } }))
      .toMatch(/config key "profiles\.p\.bwrap\.network"/);
    expect(() => parseConfig({ backend: 'bwrap', bwrap: { network: 'host' }, credentials: cred, egress: { mode: 'allowlist', allow: ['api.github.com'] } }, undefined)).not.toThrow();
    expect(() => parseConfig({ backend: 'bwrap', bwrap: { network: 'host' } }, undefined)).not.toThrow();
    expect(() => parseConfig({ backend: 'bwrap', credentials: cred }, undefined)).not.toThrow();
  });

  it('explain notes only an isolation the operator turned off', () => {
    const base = parseConfig({ backend: 'bwrap' }, undefined).base;
    expect(isolationNoteOf(bwrapModule, base)).toBeUndefined();
    const off = parseConfig({ backend: 'bwrap', bwrap: { seccomp: false, network: 'host' } }, undefined).base;
    expect(isolationNoteOf(bwrapModule, off)).toMatch(/WITHOUT the syscall filter.*and on the host's network/);
  });

  it('the HTTP binding schema admits the isolation of every registered backend', () => {
    const base = {
      backend: 'x', kill: 'tags', tenant: 't', profile: 'p', sandboxKey: 'k', rule: 'r', persistent: true, mounted: false, mountReason: '', cwd: '/', envNames: [], envMissing: [],
      egress: { mode: 'open', proxy: false, credentials: [] },
      lifecycle: { whenIdle: 'removed', afterSeconds: 3600 },
    };
    for (const m of BUILTIN_BACKENDS.modules) expect(Binding.safeParse({ ...base, isolation: m.traits.isolation }).success, m.name).toBe(true);
  });
});
