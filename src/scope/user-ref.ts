import { UsageError } from '../errors.js';

/** An end user of a messaging platform, parsed from `platform:id`. */
export interface UserRef {
  platform: string;
  id: string;
}

const EXPECTED = 'expected the form `platform:id`, e.g. telegram:123456789';
const PLATFORM_RE = /^[a-z0-9]{1,32}$/;
const ID_MAX_CHARS = 128;
/**
 * Characters an id may not contain: whitespace of any kind, path separators, controls,
 * invisible format characters (zero-width joiners and the like, which would let two ids look
 * the same to a person) and lone surrogates (which have no UTF-8 form, so two different ids
 * could encode to the same bytes).
 */
const ID_FORBIDDEN_RE = /[\s\p{Z}\p{Cc}\p{Cf}\p{Cs}/\\]/u;

/**
 * Parse an end-user reference. Splits at the first `:`, so the id may itself contain `:`
 * (Matrix ids do).
 *
 * @example
 * parseUserRef('telegram:123456789') // { platform: 'telegram', id: '123456789' }
 * parseUserRef('whatsapp:+15551234567') // { platform: 'whatsapp', id: '+15551234567' }
 * @throws UsageError naming the expected form when the reference is malformed.
 */
export function parseUserRef(ref: string): UserRef {
  if (typeof ref !== 'string') throw new UsageError(`user must be a string; ${EXPECTED}`);
  const colon = ref.indexOf(':');
  if (colon < 0) throw new UsageError(`user "${ref}" has no platform; ${EXPECTED}`);
  const platform = ref.slice(0, colon);
  const id = ref.slice(colon + 1);
  if (!PLATFORM_RE.test(platform)) {
    throw new UsageError(
      `user "${ref}": platform "${platform}" must be 1-32 lowercase letters or digits; ${EXPECTED}`,
    );
  }
  const idChars = [...id].length;
  if (idChars < 1 || idChars > ID_MAX_CHARS) {
    throw new UsageError(`user "${ref}": id must be 1-${ID_MAX_CHARS} characters; ${EXPECTED}`);
  }
  if (ID_FORBIDDEN_RE.test(id)) {
    throw new UsageError(
      `user ${JSON.stringify(ref)}: id may not contain whitespace, '/', '\\' or control characters; ${EXPECTED}`,
    );
  }
  if (id === '.' || id === '..') {
    throw new UsageError(`user "${ref}": id may not be "." or ".."; ${EXPECTED}`);
  }
  return { platform, id };
}

/** The canonical `platform:id` string of a parsed reference. */
export function formatUserRef(user: UserRef): string {
  return `${user.platform}:${user.id}`;
}
