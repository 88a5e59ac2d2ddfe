import { createHash } from 'node:crypto';
import { lstat, mkdir, rm } from 'node:fs/promises';
import { join, relative, sep } from 'node:path';
import { BerthError } from '../errors.js';

/*
 * Exports land in a host dir private to one call scope's session:
 *   $BERTH_HOME/staging/<tenant>/<digest(tenant, profile, sessionRef)>/<digest(tenant, profile, user, sessionRef)>/
 * The session level lets a close remove every user's exports of that session without knowing
 * the users (a reaper closing an idle session has no user at hand); the leaf keeps two users of
 * one session id apart. Every level is 0700.
 */

function sha(parts: readonly (string | null)[]): string {
  return createHash('sha256').update(JSON.stringify(parts)).digest('hex').slice(0, 32);
}

/** The tenant's dir: the name itself when it is lowercase-safe, else `_` + a digest (no case-folding or `..` collisions). */
export function tenantDirName(tenant: string): string {
  return /^[a-z0-9][a-z0-9._-]{0,63}$/.test(tenant) && tenant !== '.' && tenant !== '..' ? tenant : `_${sha([tenant]).slice(0, 16)}`;
}

export function stagingRoot(berthHome: string): string {
  return join(berthHome, 'staging');
}

/** The session-level staging dir (every user of that session below it). */
export function sessionStagingDir(berthHome: string, s: { tenant: string; profile: string; sessionRef: string }): string {
  return join(stagingRoot(berthHome), tenantDirName(s.tenant), sha([s.tenant, s.profile, s.sessionRef]));
}

/**
 * The staging dir of one call scope.
 *
 * @example
 * stagingDirFor('/home/ana/.berth', { tenant: 'acme', profile: 'default', user: 'telegram:1', sessionRef: 'chat-42' })
 * // '/home/ana/.berth/staging/acme/<32 hex>/<32 hex>'
 */
export function stagingDirFor(berthHome: string, s: { tenant: string; profile: string; user: string | undefined; sessionRef: string }): string {
  return join(sessionStagingDir(berthHome, s), sha([s.tenant, s.profile, s.user ?? null, s.sessionRef]));
}

/** Creates `dir` (and its parents below `berthHome`) as 0700 dirs; refuses a symlink or non-dir on the way. */
export async function ensurePrivateDir(berthHome: string, dir: string): Promise<string> {
  const rel = relative(berthHome, dir);
  if (rel.startsWith('..') || rel === '') throw new BerthError('internal', `staging dir ${dir} is not under ${berthHome}`);
  let cur = berthHome;
  for (const part of rel.split(sep)) {
    cur = join(cur, part);
    await mkdir(cur, { mode: 0o700 }).catch((e: NodeJS.ErrnoException) => { if (e.code !== 'EEXIST') throw e; });
    const st = await lstat(cur);
    if (!st.isDirectory() || st.isSymbolicLink()) {
      throw new BerthError('staging_unsafe', `staging path ${cur} is not a plain directory; remove it and retry`);
    }
  }
  return dir;
}

/** Removes a session's staging dir (every user's exports of it). Already gone is success. */
export async function removeSessionStaging(berthHome: string, s: { tenant: string; profile: string; sessionRef: string }): Promise<void> {
  await rm(sessionStagingDir(berthHome, s), { recursive: true, force: true });
}
