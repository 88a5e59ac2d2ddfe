import type { IncomingMessage } from 'node:http';
import { readBody } from '../kit/body-reader.js';
import { HttpError } from './http-error.js';

const strictUtf8 = new TextDecoder('utf-8', { fatal: true });

/**
 * The body of a JSON route's request, up to `limitBytes` (see `readBody`), or the HTTP error that
 * answers it: 413 over the limit, 400 when the client went away mid-body.
 */
export async function bodyOf(req: IncomingMessage, limitBytes: number): Promise<Buffer> {
  const body = await readBody(req, limitBytes);
  if (body.ok) return body.bytes;
  throw body.reason === 'too_large' ? tooLarge(limitBytes) : new HttpError('bad_request', 'the request body could not be read');
}

/**
 * Reads and discards what is left of a request body, for at most `timeoutMs`. An answer sent
 * while the client still sends would reach a client whose connection is then reset, so it would
 * never read it: a refused body is drained first (and the connection closed after the answer).
 */
export function drainBody(req: IncomingMessage, timeoutMs: number): Promise<void> {
  if (req.complete || req.destroyed) return Promise.resolve();
  return new Promise((resolve) => {
    const done = (): void => {
      clearTimeout(timer);
      req.off('end', done);
      req.off('error', done);
      req.off('close', done);
      resolve();
    };
    const timer = setTimeout(done, timeoutMs);
    req.once('end', done);
    req.once('error', done);
    req.once('close', done);
    req.resume();
  });
}

/**
 * The length an upload declares. Required: the body is streamed into the sandbox as it arrives,
 * and the archive carrying it needs its size before the first byte (411 without one).
 */
export function declaredLength(req: IncomingMessage): number {
  const declared = req.headers['content-length'];
  if (declared === undefined) {
    throw new HttpError('length_required',
      'PUT /v1/files needs a Content-Length header: the body is streamed into the sandbox as it arrives and its size must be known first; ' +
      'send the file with its length (curl -T FILE or --data-binary @FILE), not chunked');
  }
  if (!/^\d+$/.test(declared) || !Number.isSafeInteger(Number(declared))) {
    throw new HttpError('bad_request', `Content-Length ${JSON.stringify(declared)} is not a whole number of bytes`);
  }
  return Number(declared);
}

function tooLarge(limitBytes: number): HttpError {
  return new HttpError('too_large', `the request body is larger than ${limitBytes} bytes; send less (file uploads: PUT /v1/files takes raw bytes)`);
}

/** Strict UTF-8 JSON. An empty body is `{}` (a POST whose fields are all optional). */
export function parseJsonBody(req: IncomingMessage, body: Buffer): unknown {
  const type = req.headers['content-type'];
  if (type !== undefined && !/^application\/json\s*(;|$)/i.test(type)) {
    throw new HttpError('unsupported_media_type', `send the body as application/json, not ${JSON.stringify(type)}`);
  }
  if (body.length === 0) return {};
  let text: string;
  try {
    text = strictUtf8.decode(body);
  } catch {
    throw new HttpError('bad_request', 'the request body is not valid UTF-8');
  }
  try {
    return JSON.parse(text) as unknown;
  } catch (err) {
    throw new HttpError('bad_request', `the request body is not valid JSON (${(err as Error).message})`);
  }
}

/** The query string of a request target, with its `?` (empty when there is none). */
export function searchOf(target: string): string {
  const q = target.indexOf('?');
  return q === -1 ? '' : target.slice(q);
}

/** The path of a request target, as sent (not decoded). */
export function pathOf(target: string): string {
  const q = target.indexOf('?');
  return q === -1 ? target : target.slice(0, q);
}

/**
 * A query string as a plain object of strings. Stricter than URLSearchParams, which silently
 * turns bad percent-escapes and invalid UTF-8 into U+FFFD: here they are errors, as are repeated
 * keys (which one would win is a guess).
 */
export function parseQuery(search: string): Record<string, string> {
  const out: Record<string, string> = Object.create(null) as Record<string, string>;
  if (search.startsWith('?')) search = search.slice(1);
  if (search === '') return out;
  for (const part of search.split('&')) {
    if (part === '') continue;
    const eq = part.indexOf('=');
    const key = decodeComponent(eq === -1 ? part : part.slice(0, eq));
    const value = decodeComponent(eq === -1 ? '' : part.slice(eq + 1));
    if (Object.prototype.hasOwnProperty.call(out, key)) {
      throw new HttpError('bad_request', `query parameter ${JSON.stringify(key)} is given twice; give it once`);
    }
    out[key] = value;
  }
  return out;
}

function decodeComponent(s: string): string {
  const bytes: number[] = [];
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c === 0x25) {
      const hex = s.slice(i + 1, i + 3);
      if (!/^[0-9A-Fa-f]{2}$/.test(hex)) throw new HttpError('bad_request', 'the query string has a malformed %-escape');
      bytes.push(parseInt(hex, 16));
      i += 2;
    } else if (c === 0x2b) {
      bytes.push(0x20);
    } else if (c < 0x80) {
      bytes.push(c);
    } else {
      // Raw non-ASCII in a URL: node hands it over as latin1 code units; re-encode as UTF-8 would guess. Refuse.
      throw new HttpError('bad_request', 'the query string has raw non-ASCII bytes; percent-encode them as UTF-8');
    }
  }
  try {
    return strictUtf8.decode(Uint8Array.from(bytes));
  } catch {
    throw new HttpError('bad_request', 'the query string is not valid UTF-8 once decoded');
  }
}
