import { statSync } from 'node:fs';
import path from 'node:path';
import type { ConfigPlaces, CoreSettings } from '../config/types.js';
import { ConfigError } from '../errors.js';

/*
 * `workspace.allowedRoots`: an operator's list of host dirs workspaces may come from. Compared by
 * real path on both sides, so neither a symlink inside a root pointing out of it nor a root that
 * is itself a symlink changes what is allowed.
 */

/**
 * Why a workspace's real path is outside every allowed root, or undefined when it is under one
 * (the root itself included) or no roots are set. A root that no longer resolves allows nothing.
 *
 * @example
 * outsideAllowedRootsReason('/srv/other', ['/srv/projects'], hostMountFs)
 * // 'is not under an allowed root (workspace.allowedRoots: /srv/projects)'
 */
export function outsideAllowedRootsReason(
  realPath: string,
  roots: readonly string[],
  fs: { realpath(p: string): string | undefined },
): string | undefined {
  if (roots.length === 0) return undefined;
  for (const root of roots) {
    const real = fs.realpath(root);
    if (real !== undefined && (realPath === real || realPath.startsWith(real.endsWith(path.sep) ? real : real + path.sep))) return undefined;
  }
  return `is not under an allowed root (workspace.allowedRoots: ${roots.join(', ')})`;
}

/**
 * Start-up check: every `workspace.allowedRoots` entry of every profile is an existing directory.
 * A missing root would refuse every workspace meant to be under it, so it is a config error.
 */
export function assertAllowedRootsExist(config: ConfigPlaces): void {
  const sections: [string, CoreSettings][] = [['workspace.allowedRoots', config.base],
    ...Object.entries(config.profiles).map(([name, p]): [string, CoreSettings] => [`profiles.${name}.workspace.allowedRoots`, p])];
  const problems: string[] = [];
  for (const [key, settings] of sections) {
    // A profile inherits the top-level list: report each entry once, where it was written.
    const inherited = settings === config.base ? [] : config.base.workspace.allowedRoots;
    for (const root of settings.workspace.allowedRoots.filter((r) => !inherited.includes(r))) {
      let isDir: boolean;
      try {
        isDir = statSync(root).isDirectory();
      } catch {
        problems.push(`${key} entry ${root} does not exist; create it or remove the entry`);
        continue;
      }
      if (!isDir) problems.push(`${key} entry ${root} is not a directory; name the directory workspaces may come from`);
    }
  }
  if (problems.length > 0) throw new ConfigError(problems.join('; '));
}
