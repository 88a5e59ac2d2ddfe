import { createHmac, randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { createPrivateFileOnce, preparePrivateDir, readPrivateFile } from './private-files.js';

/*
 * Placeholders: what a sandbox's environment holds instead of a credential. One is an HMAC of the
 * sandbox identity digest and the credential name under a per-installation secret, so a restarted
 * berth derives the same ones (the sandbox's shells keep them in their environment), while a
 * placeholder says nothing about the value and one sandbox cannot derive another's.
 */

export const PLACEHOLDER_PREFIX = 'berth-ph-';
const SECRET_FILE = 'placeholder.key';
const SECRET_BYTES = 32;
/** 128 bits of the HMAC as hex: unique, and [0-9a-f] is safe in headers, URLs and Basic credentials. */
const PLACEHOLDER_HEX = 32;

/**
 * The installation's placeholder secret from `dir` (berth passes `$BERTH_HOME/egress`), created
 * there 0600 on first use.
 *
 * @throws ConfigError when the file is readable by others or not berth's own.
 */
export function openPlaceholderSecret(dir: string): Buffer {
  preparePrivateDir(dir);
  const path = join(dir, SECRET_FILE);
  const existing = readPrivateFile(path);
  if (existing !== undefined && existing.length === SECRET_BYTES) return existing;
  if (existing === undefined) createPrivateFileOnce(path, randomBytes(SECRET_BYTES));
  const secret = readPrivateFile(path);
  if (secret?.length !== SECRET_BYTES) throw new Error(`"${path}" is not a ${SECRET_BYTES}-byte placeholder secret; remove it to make a new one`);
  return secret;
}

/**
 * The placeholder for credential `name` in the sandbox whose identity digest is `sandboxDigest`
 * (`identityDigest` of its identity): `berth-ph-` and 32 hex digits.
 *
 * @example
 * placeholderFor(secret, identityDigest(id), 'GITHUB_TOKEN') // 'berth-ph-3f9a...'
 */
export function placeholderFor(secret: Buffer, sandboxDigest: string, name: string): string {
  const mac = createHmac('sha256', secret).update(`${sandboxDigest}\0${name}`, 'utf8').digest('hex');
  return `${PLACEHOLDER_PREFIX}${mac.slice(0, PLACEHOLDER_HEX)}`;
}
