import { describe, expect, it } from 'vitest';
import { placeholderFor } from '../../src/egress/placeholders.js';
import { caBundle, egressEnv, egressRedactValues, sandboxCredentials } from '../../src/egress/sandbox-setup.js';

const secret = Buffer.alloc(32, 1);
const specs = [
  { name: 'GITHUB_TOKEN', from: 'GH_SOURCE', hosts: ['api.github.com'] },
  { name: 'NPM_TOKEN', from: 'NPM_TOKEN', hosts: ['*.npmjs.org'], inject: { header: 'Authorization', value: 'Bearer {value}' } },
  { name: 'ABSENT', from: 'NOT_SET', hosts: ['x.example'] },
];

describe('sandbox setup', () => {
  it('gives each credential its value from `from` and the sandbox\'s placeholder; lists the missing', () => {
    const r = sandboxCredentials(specs, { GH_SOURCE: 'ghp_value_1', NPM_TOKEN: 'npm_value_2', GITHUB_TOKEN: 'not this one' }, secret, 'digest-a');
    expect(r.missing).toEqual(['NOT_SET']);
    expect(r.credentials).toEqual([
      { name: 'GITHUB_TOKEN', value: 'ghp_value_1', placeholder: placeholderFor(secret, 'digest-a', 'GITHUB_TOKEN'), hosts: ['api.github.com'] },
      { name: 'NPM_TOKEN', value: 'npm_value_2', placeholder: placeholderFor(secret, 'digest-a', 'NPM_TOKEN'), hosts: ['*.npmjs.org'], inject: { header: 'Authorization', value: 'Bearer {value}' } },
    ]);
  });

  it('sets the proxy in every spelling, keeps loopback off it, points every TLS stack at the bundle, and holds placeholders only', () => {
    const { credentials } = sandboxCredentials(specs, { GH_SOURCE: 'ghp_value_1', NPM_TOKEN: 'npm_value_2' }, secret, 'd');
    const env = egressEnv(40123, { bundle: '/etc/berth/ca-bundle.pem', berthCa: '/etc/berth/egress-ca.pem' }, credentials);
    for (const n of ['HTTP_PROXY', 'HTTPS_PROXY', 'ALL_PROXY', 'http_proxy', 'https_proxy', 'all_proxy']) expect(env[n]).toBe('http://127.0.0.1:40123');
    expect(env['NO_PROXY']).toBe('localhost,127.0.0.1,::1');
    for (const n of ['SSL_CERT_FILE', 'REQUESTS_CA_BUNDLE', 'CURL_CA_BUNDLE', 'GIT_SSL_CAINFO']) expect(env[n]).toBe('/etc/berth/ca-bundle.pem');
    expect(env['NODE_EXTRA_CA_CERTS']).toBe('/etc/berth/egress-ca.pem');
    expect(env['GITHUB_TOKEN']).toMatch(/^berth-ph-/);
    expect(JSON.stringify(env)).not.toContain('ghp_value_1');
    expect(JSON.stringify(env)).not.toContain('npm_value_2');
  });

  it('appends berth\'s CA to the system bundle, and redacts values and placeholders', () => {
    expect(caBundle('SYS', 'CA\n')).toBe('SYS\n# berth egress CA\nCA\n');
    const { credentials } = sandboxCredentials(specs.slice(0, 1), { GH_SOURCE: 'ghp_value_1' }, secret, 'd');
    expect(egressRedactValues(credentials)).toEqual([credentials[0]!.placeholder, 'ghp_value_1']);
  });
});
