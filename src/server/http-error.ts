import { ERROR_CATEGORY, isBerthError, isRefusalCategory, type ErrorCategory, type ErrorCode } from '../errors.js';

/** Codes only the HTTP layer answers with: the request itself, before any berth call. */
export type HttpOnlyCode =
  | 'bad_request'
  | 'unauthorized'
  | 'method_not_allowed'
  | 'request_timeout'
  | 'length_required'
  | 'unsupported_media_type'
  | 'too_many_calls'
  | 'too_many_bytes';

/** Every code an HTTP answer carries in `{error: {code, message}}`. */
export type HttpCode = ErrorCode | HttpOnlyCode;

/** The category of each code only the HTTP layer answers with (`ERROR_CATEGORY` holds berth's own). */
const HTTP_ONLY_CATEGORY: Readonly<Record<HttpOnlyCode, ErrorCategory>> = {
  bad_request: 'input',
  unauthorized: 'refused',
  method_not_allowed: 'input',
  request_timeout: 'input',
  length_required: 'input',
  unsupported_media_type: 'input',
  too_many_calls: 'bound',
  too_many_bytes: 'bound',
};

/** The category of any code an HTTP answer carries. */
export function categoryOf(code: HttpCode): ErrorCategory {
  return Object.hasOwn(HTTP_ONLY_CATEGORY, code) ? HTTP_ONLY_CATEGORY[code as HttpOnlyCode] : ERROR_CATEGORY[code as ErrorCode];
}

/** Whether an answer is a refusal (counted in `berth_refusals_total`), not a failure. */
export function isRefusal(code: HttpCode): boolean {
  return isRefusalCategory(categoryOf(code));
}

/**
 * The status of each category, the HTTP edge's one table (`/v1` and `/mcp` alike): 4xx where the
 * caller can change something (400 its input, 403 a refusal, 404 a thing it named that is not
 * there, 413 over a size bound, 422 a backend that cannot do this); 503 gone or going while the
 * call ran, so retrying on a running berth may work; 500 berth, its engine or a helper failed.
 * `config` is 500 on every route: the config is the operator's, so no request can fix it.
 */
const STATUS_OF_CATEGORY: Readonly<Record<ErrorCategory, number>> = {
  input: 400,
  config: 500,
  refused: 403,
  not_found: 404,
  bound: 413,
  unsupported: 422,
  gone: 503,
  fault: 500,
  bug: 500,
};

/** Codes whose status says more than their category's. */
const STATUS_OF_CODE: Readonly<Partial<Record<HttpCode, number>>> = {
  unauthorized: 401,
  method_not_allowed: 405,
  request_timeout: 408,
  length_required: 411,
  unsupported_media_type: 415,
  // A tenant's limits: too many at once, not too big.
  tenant_limit: 429,
  too_many_calls: 429,
  too_many_bytes: 429,
  // The session was closed under the call: a conflict with the caller's own close, not an outage.
  session_closed: 409,
  // A snapshot, restore or fork of a sandbox a command runs in: a conflict with the caller's own call.
  sandbox_busy: 409,
  // A wait that ran out.
  timeout: 504,
  // A sandbox over its disk bound.
  disk_limit_exceeded: 507,
};

/** The status of a code: its own where it has one, else its category's. */
export function statusOf(code: HttpCode): number {
  return STATUS_OF_CODE[code] ?? STATUS_OF_CATEGORY[categoryOf(code)];
}

/** Every code an HTTP answer may carry, for the OpenAPI document. */
export const HTTP_CODES = [...Object.keys(ERROR_CATEGORY), ...Object.keys(HTTP_ONLY_CATEGORY)] as [HttpCode, ...HttpCode[]];

/** What a client sees for a bug in berth (a code `internal`, or no berth error at all); the stack goes to the server log. */
const BUG_MESSAGE = 'berth failed to handle this request: this is a bug in berth; the server log has the details, please report it with them';

/** An error answered with the status of its code and `{error: {code, message}}`. */
export class HttpError extends Error {
  readonly status: number;

  constructor(readonly code: HttpCode, message: string, readonly headers: Record<string, string> = {}) {
    super(message);
    this.name = 'HttpError';
    this.status = statusOf(code);
  }
}

/**
 * The one translator from what a handler threw to what the client sees. Only errors berth
 * understands carry their message; a bug (`internal`, or no berth error) is a 500 with a generic
 * message, and the caller logs its stack.
 */
export function toHttpError(err: unknown): HttpError {
  if (err instanceof HttpError) return err;
  if (isBerthError(err) && err.code !== 'internal') return new HttpError(err.code, err.message);
  return new HttpError('internal', BUG_MESSAGE);
}

export function errorBody(e: HttpError): string {
  return JSON.stringify({ error: { code: e.code, message: e.message } });
}
