import { realpathSync, statSync } from 'node:fs';
import type { SectionHostBind } from '../config/section.js';
import { ConfigError } from '../errors.js';
import { credentialSurfaceReason, type CredentialSurfaceContext } from './credential-surfaces.js';

/** A host dir a backend section binds, with the config key that names it (`profiles.bot.docker.volumes`). */
export interface PlacedHostBind {
  key: string;
  bind: SectionHostBind;
}

/**
 * Host dirs an operator binds through a backend's section (`docker.volumes`) go through the same
 * credential-surface refusals as a workspace mount (design §4). Checked once at start-up, for
 * each profile on the backend whose section it is: a volume that exposes `~/.ssh`, a docker socket
 * or berth's own state is a config error, never a silent bind. So is a read-write one owned by
 * root: a sandbox writing there as root could plant a set-uid-root program for any host user
 * (design §8); the operator hands it to an unprivileged owner or binds it read-only.
 */
export function assertHostBindsAllowed(binds: readonly PlacedHostBind[], ctx: Omit<CredentialSurfaceContext, 'realpath'>): void {
  const problems: string[] = [];
  const realpath = (p: string): string | undefined => {
    try {
      return realpathSync(p);
    } catch {
      return undefined;
    }
  };
  for (const { key, bind } of binds) {
    const real = realpath(bind.source);
    if (real === undefined) {
      problems.push(`${key} entry "${bind.describe}": host path ${bind.source} does not exist; create it or remove the entry`);
      continue;
    }
    const reason = credentialSurfaceReason(real, { ...ctx, realpath });
    if (reason !== undefined) {
      problems.push(`${key} entry "${bind.describe}": ${bind.source} ${reason}; bind a project folder instead`);
    } else if (!bind.readOnly && statSync(real).uid === 0) {
      problems.push(
        `${key} entry "${bind.describe}": ${bind.source} is owned by root and bound read-write, so a sandbox would write there as root ` +
          `and could leave a set-uid-root program any host user can run; hand it to an unprivileged owner (chown -R <uid>:<gid> ${bind.source}: ` +
          `the sandbox then runs as that uid) or bind it read-only (${bind.source}:<target>:ro)`,
      );
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
export function volumesForTenant<V extends { tenants: readonly string[] | '*' }>(volumes: readonly V[], tenant: string): V[] {
  return volumes.filter((v) => v.tenants === '*' || v.tenants.includes(tenant));
}
