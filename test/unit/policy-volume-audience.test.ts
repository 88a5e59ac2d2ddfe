import { describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/setup/parse-config.js';
import { volumesForTenant } from '../../src/policy/volumes.js';

describe('docker.volumes audience', () => {
  const volumes = parseConfig({
    backend: 'docker',
    docker: {
      volumes: [
        '/srv/cli:/cli',
        { source: '/srv/acme', target: '/acme', tenants: ['acme', 'initech'] },
        { source: '/srv/all', target: '/all', readOnly: true, tenants: '*' },
      ],
    },
  }).base.docker.volumes;
  const targets = (tenant: string) => volumesForTenant(volumes, tenant).map((v) => v.target);

  it('a string entry reaches the CLI tenant "local" only; a mapping its listed tenants; "*" every tenant', () => {
    expect(targets('local')).toEqual(['/cli', '/all']);
    expect(targets('acme')).toEqual(['/acme', '/all']);
    expect(targets('initech')).toEqual(['/acme', '/all']);
    expect(targets('globex')).toEqual(['/all']);
  });

  it('matches tenant names exactly (no prefixes, no case folding)', () => {
    expect(targets('acm')).toEqual(['/all']);
    expect(targets('ACME')).toEqual(['/all']);
    expect(targets('acme ')).toEqual(['/all']);
  });
});
