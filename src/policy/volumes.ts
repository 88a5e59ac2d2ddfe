import { describeVolume } from '../config/schema.js';
import { realpathSync } from 'node:fs';
import type { BerthConfig, VolumeSettings } from '../config/types.js';
import { ConfigError } from '../errors.js';
import { credentialSurfaceReason, type CredentialSurfaceContext } from './credential-surfaces.js';

/**
 * `docker.volumes` host paths go through the same credential-surface refusals as a workspace
 * mount (DESIGN section 4). Checked once at start-up: a volume that exposes `~/.ssh`, a docker
 * socket or berth's own state is a config error, never a silent bind.
 */
export function assertVolumesAllowed(config: BerthConfig, ctx: Omit<CredentialSurfaceContext, 'realpath'>): void {
  const sections: [string, BerthConfig['base']][] = [['docker.volumes', config.base],
    ...Object.entries(config.profiles).map(([name, p]): [string, BerthConfig['base']] => [`profiles.${name}.docker.volumes`, p])];
  const problems: string[] = [];
  for (const [key, settings] of sections) {
    if (settings.backend !== 'docker') continue;
    for (const entry of settings.docker.volumes) {
      const host = entry.source;
      let real: string;
      try {
        real = realpathSync(host);
      } catch {
        problems.push(`${key} entry "${describeVolume(entry)}": host path ${host} does not exist; create it or remove the entry`);
        continue;
      }
      const reason = credentialSurfaceReason(real, { ...ctx, realpath: (p) => { try { return realpathSync(p); } catch { return undefined; } } });
      if (reason !== undefined) problems.push(`${key} entry "${describeVolume(entry)}": ${host} ${reason}; bind a project folder instead`);
    }
  }
  if (problems.length > 0) throw new ConfigError(problems.join('; '));
}

/**
 * The `docker.volumes` entries a sandbox of `tenant` gets: those whose audience names it, or `'*'`.
 * A sandbox belongs to exactly one tenant (the tenant is part of every identity), so a bind never
 * reaches a tenant the operator did not list.
 *
 * @example
 * volumesForTenant([{ source: '/srv/a', target: '/data', readOnly: false, tenants: ['acme'] }], 'globex') // → []
 */
export function volumesForTenant(volumes: readonly VolumeSettings[], tenant: string): VolumeSettings[] {
  return volumes.filter((v) => v.tenants === '*' || v.tenants.includes(tenant));
}
