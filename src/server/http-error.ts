import { isBerthError, type ErrorCode } from '../errors.js';

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

/**
 * The status of every code, the one table of the HTTP edge (`/v1` and `/mcp` alike).
 *
 * - 4xx: the caller can change something. 400 its input (`usage` is the library refusing an
 *   argument, as a schema violation is), 403 a refusal by policy or by its token, 404 a thing it
 *   named that is not there, 409 its session was closed under the call, 413 over a size bound,
 *   422 a backend that cannot do this, 429 a tenant limit, 408 a request head that did not arrive in time.
 * - 503: gone or going while the call ran (a backend down, shutdown, a shell or warden closing
 *   with its sandbox); retrying on a running berth may work. 504 a wait that ran out, 507 a
 *   sandbox over its disk bound.
 * - 500: berth, its engine or a helper failed. `config_invalid` is here, on every route: the
 *   config is the operator's, so no request can fix it (`/mcp` too).
 */
export const HTTP_STATUS: Readonly<Record<HttpCode, number>> = {
  bad_request: 400,
  usage: 400,
  offset_out_of_range: 400,
  upload_incomplete: 400,
  unauthorized: 401,
  policy_refused: 403,
  profile_forbidden: 403,
  host_backend_forbidden: 403,
  not_found: 404,
  path_not_found: 404,
  job_not_found: 404,
  method_not_allowed: 405,
  request_timeout: 408,
  session_closed: 409,
  length_required: 411,
  too_large: 413,
  tenant_limit: 429,
  unsupported_media_type: 415,
  unsupported: 422,
  job_start_failed: 422,
  too_many_calls: 429,
  too_many_bytes: 429,
  config_invalid: 500,
  shell_start_failed: 500,
  sandbox_start_failed: 500,
  spawn_failed: 500,
  warden_gone: 500,
  kill_helper_failed: 500,
  transfer_failed: 500,
  staging_unsafe: 500,
  job_read_failed: 500,
  disk_measure_failed: 500,
  disk_image_failed: 500,
  helper_output_too_large: 500,
  docker_error: 500,
  invalid_ref: 500,
  image_pull_failed: 500,
  image_build_failed: 500,
  listen_failed: 500,
  internal: 500,
  backend_unavailable: 503,
  host_key_refused: 503,
  shutting_down: 503,
  shell_closed: 503,
  warden_closed: 503,
  timeout: 504,
  disk_limit_exceeded: 507,
};

/** An error answered with the status of its code and `{error: {code, message}}`. */
export class HttpError extends Error {
  readonly status: number;

  constructor(readonly code: HttpCode, message: string, readonly headers: Record<string, string> = {}) {
    super(message);
    this.name = 'HttpError';
    this.status = HTTP_STATUS[code];
  }
}

/**
 * The one translator from what a handler threw to what the client sees. Only errors berth
 * understands carry their message; anything else is a 500 with a generic message (logged).
 */
export function toHttpError(err: unknown): HttpError {
  if (err instanceof HttpError) return err;
  if (isBerthError(err)) return new HttpError(err.code, err.message);
  return new HttpError('internal', 'berth failed to handle this request; the server log has the details');
}

export function errorBody(e: HttpError): string {
  return JSON.stringify({ error: { code: e.code, message: e.message } });
}
