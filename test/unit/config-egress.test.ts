import { describe, expect, it } from 'vitest';
import { settingsFor } from '../../src/config/types.js';
import { formatEffectiveConfig } from '../../src/setup/format-config.js';
import { parseConfig } from '../../src/setup/parse-config.js';
import { configProblem } from '../helpers/config-problem.js';

const bot = {
  backend: 'docker',
  egress: { mode: 'allowlist', allow: ['api.github.com', 'github.com', '*.githubusercontent.com'] },
  credentials: { GITHUB_TOKEN: { from: 'GITHUB_TOKEN', hosts: ['api.github.com', 'github.com'] } },
};

describe('egress and credentials in the config', () => {
  it('no section is open with no credentials; a profile\'s allowlist and credentials parse', () => {
    const c = parseConfig({ profiles: { bot } });
    expect(c.base.egress.mode).toBe('open');
    expect(c.base.credentials).toEqual([]);
    const s = settingsFor(c, 'bot');
    expect(s.egress.mode).toBe('allowlist');
    expect(s.credentials.map((x) => [x.name, x.from, x.hosts])).toEqual([['GITHUB_TOKEN', 'GITHUB_TOKEN', ['api.github.com', 'github.com']]]);
    expect(c.egressProxy).toEqual({ upstreamCaFile: undefined, maxConnectionsPerSandbox: 256 });
  });

  it('a malformed name or CIDR is an error naming its key and the fix', () => {
    expect(configProblem({ egress: { mode: 'allowlist', allow: ['*.x*.y'] } })).toMatch(/config key "egress\.allow\[0\]": .*leading "\*\."/);
    expect(configProblem({ profiles: { p: { egress: { mode: 'allowlist', allow: [{ cidr: '10.0.0.1/8' }] } } } })).toMatch(/config key "profiles\.p\.egress\.allow\[0\]\.?(cidr)?".*10\.0\.0\.0\/8/);
    expect(configProblem({ egress: { allow: ['a.example'] } })).toMatch(/egress\.mode/);
  });

  it('a credential whose hosts its profile\'s egress does not let through is an error, also when it inherits the credentials', () => {
    expect(configProblem({ backend: 'docker', egress: { mode: 'allowlist', allow: ['github.com'] }, credentials: { T: { hosts: ['api.github.com'] } } }))
      .toMatch(/config key "credentials\.T\.hosts\[0\]"/);
    expect(configProblem({ backend: 'docker', credentials: { T: { hosts: ['api.github.com'] } }, profiles: { p: { egress: { mode: 'allowlist', allow: ['github.com'] } } } }))
      .toMatch(/config key "profiles\.p\.credentials\.T\.hosts\[0\]"/);
  });

  it('a credential that is also a plain variable, or whose source env.forward forwards, is an error', () => {
    expect(configProblem({ ...bot, env: { forward: ['GITHUB_TOKEN'] } })).toMatch(/"GITHUB_TOKEN" is also a plain variable/);
    expect(configProblem({ ...bot, env: { static: { GITHUB_TOKEN: 'x' } } })).toMatch(/"GITHUB_TOKEN" is also a plain variable/);
    expect(configProblem({ ...bot, credentials: { GH: { from: 'GITHUB_TOKEN', hosts: ['github.com'] } }, env: { forward: ['GITHUB_TOKEN'] } }))
      .toMatch(/comes from "GITHUB_TOKEN", which env\.forward also forwards/);
  });

  it('allowlist, none or credentials on a backend that cannot confine its network is an error naming the backends that can', () => {
    expect(configProblem({ backend: 'ssh', ssh: { host: 'h' }, egress: { mode: 'allowlist', allow: ['a.example'] } }))
      .toMatch(/backend "ssh" cannot enforce egress mode allowlist.*use backend: docker, bwrap or kubernetes/);
    expect(configProblem({ backend: 'local', egress: { mode: 'none' } })).toMatch(/backend "local" cannot enforce egress mode none/);
    expect(configProblem({ backend: 'local', credentials: { T: { hosts: ['a.example'] } } })).toMatch(/config key "credentials": backend "local" cannot put berth's egress proxy/);
    expect(configProblem({ backend: 'bwrap', egress: { mode: 'allowlist', allow: ['a.example'] } })).toBe('');
  });

  it('a warm pool with an allowlist or credentials is an error', () => {
    expect(configProblem({ ...bot, warmPool: { size: 2 } })).toMatch(/warmPool\.size.*cannot serve egress mode allowlist with credentials/);
  });

  it('a static name mapped to an address berth always refuses, with no cidr: entry naming it, is an error naming the entry to add', () => {
    expect(configProblem({ profiles: { bot: { ...bot, egress: { ...bot.egress, hosts: { 'db.internal': '10.20.1.5' } } } } })).toMatch(
      /config key "profiles\.bot\.egress\.hosts\.db\.internal": maps db\.internal to 10\.20\.1\.5 \(private\), an address berth always refuses unless a cidr: allow entry names it; add \{ cidr: 10\.20\.1\.5\/32, ports: \[PORT\] \}.*without ports opens every port/,
    );
    // The fix names the ports the name's host: entries tunnel to, not every port of the address.
    const withHost = { ...bot.egress, allow: [...bot.egress.allow, { host: 'db.internal:5432' }, { host: 'db.internal:6432' }], hosts: { 'db.internal': '10.20.1.5' } };
    expect(configProblem({ profiles: { bot: { ...bot, egress: withHost } } })).toMatch(/add \{ cidr: 10\.20\.1\.5\/32, ports: \[5432, 6432\] \} to egress\.allow \(the ports the policy reaches it on/);
    expect(configProblem({ profiles: { bot: { ...bot, egress: { ...withHost, allow: [...withHost.allow, { cidr: '10.20.1.5/32', ports: [5432, 6432] }] } } } })).toBe('');
    // A range naming it on other ports than its host: entries' leaves those unreachable: said at start-up, not refused at run time.
    expect(configProblem({ profiles: { bot: { ...bot, egress: { ...withHost, allow: [...withHost.allow, { cidr: '10.20.1.5/32', ports: [5432, 80] }] } } } }))
      .toMatch(/maps db\.internal to 10\.20\.1\.5 \(private\), an address berth always refuses, and the cidr: entries naming it leave out port 6432, which the policy reaches it on; add \{ cidr: 10\.20\.1\.5\/32, ports: \[5432, 6432\] \}/);
    // A name entry reaches it on 443 or 80: one of them open will do; neither is an error naming both.
    const byName = { ...bot.egress, allow: [...bot.egress.allow, 'db.internal'], hosts: { 'db.internal': '10.20.1.5' } };
    expect(configProblem({ profiles: { bot: { ...bot, egress: { ...byName, allow: [...byName.allow, { cidr: '10.20.1.5/32', ports: [443] }] } } } })).toBe('');
    expect(configProblem({ profiles: { bot: { ...bot, egress: { ...byName, allow: [...byName.allow, { cidr: '10.20.1.5/32', ports: [22] }] } } } }))
      .toMatch(/leave out ports 443, 80, which the policy reaches it on; add \{ cidr: 10\.20\.1\.5\/32, ports: \[443, 80\] \}/);
    expect(configProblem({ profiles: { bot: { ...bot, egress: { ...bot.egress, hosts: { meta: '169.254.169.254' } } } } })).toMatch(/maps meta to 169\.254\.169\.254 \(metadata/);
    // A range inside the class lifts it; one that merely covers it (0.0.0.0/0) does not.
    expect(configProblem({ profiles: { bot: { ...bot, egress: { ...bot.egress, allow: [...bot.egress.allow, { cidr: '10.20.0.0/16' }], hosts: { 'db.internal': '10.20.1.5' } } } } })).toBe('');
    expect(configProblem({ profiles: { bot: { ...bot, egress: { ...bot.egress, allow: [...bot.egress.allow, { cidr: '0.0.0.0/0' }], hosts: { 'db.internal': '10.20.1.5' } } } } })).toMatch(/maps db\.internal/);
    // A public address needs nothing.
    expect(configProblem({ profiles: { bot: { ...bot, egress: { ...bot.egress, hosts: { 'api.github.com': '140.82.112.5' } } } } })).toBe('');
  });

  it('config check shows the policy and where each credential comes from and may go, never a value', () => {
    const text = formatEffectiveConfig(parseConfig({ profiles: { bot: { ...bot, egress: { ...bot.egress, allow: [...bot.egress.allow, { cidr: '10.20.1.5/32' }], hosts: { 'db.internal': '10.20.1.5' } } } } }));
    expect(text).toContain('mode: allowlist');
    expect(text).toContain('- "*.githubusercontent.com"');
    expect(text).toContain('db.internal:');
    expect(text).toMatch(/GITHUB_TOKEN:\n\s+from: GITHUB_TOKEN\n\s+hosts:/);
  });
});
