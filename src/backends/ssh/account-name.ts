import { UsageError } from '../../errors.js';

/** Every account berth makes on a host: `berth-` and 24 hex digits (30 characters, within useradd's 32). */
export const ACCOUNT_NAME_PATTERN = '^berth-[0-9a-f]{24}$';
const ACCOUNT_NAME_RE = new RegExp(ACCOUNT_NAME_PATTERN);

/**
 * The account of a sandbox, from its identity digest (hex sha256 of installation, tenant, profile
 * and key; see scope/naming.ts): stable across berth restarts, different for every identity and
 * installation (96 bits), and naming nothing about the sandbox to other users of the host, who
 * can all read /etc/passwd.
 *
 * @example
 * accountName('3f1c…') // 'berth-3f1c…' (24 hex digits)
 */
export function accountName(digest: string): string {
  const hex = digest.toLowerCase();
  if (!/^[0-9a-f]{24,}$/.test(hex)) throw new UsageError(`sandbox digest "${digest}" is not a hex digest of at least 24 digits`);
  return `berth-${hex.slice(0, 24)}`;
}

export function isAccountName(name: string): boolean {
  return ACCOUNT_NAME_RE.test(name);
}
