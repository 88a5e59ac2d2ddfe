import { isBerthError } from '../errors.js';

/** An error answered with a status and `{error: {code, message}}`. */
export class HttpError extends Error {
  constructor(readonly status: number, readonly code: string, message: string, readonly headers: Record<string, string> = {}) {
    super(message);
    this.name = 'HttpError';
  }
}

/** BerthError codes → HTTP status. Anything unlisted that is a BerthError is berth failing (500). */
const STATUS_BY_CODE: Record<string, number> = {
  usage: 400,
  offset_out_of_range: 400,
  upload_incomplete: 400,
  job_not_found: 404,
  not_found: 404,
  path_not_found: 404,
  policy_refused: 403,
  profile_forbidden: 403,
  host_backend_forbidden: 403,
  too_large: 413,
  disk_limit_exceeded: 507,
  unsupported: 422,
  job_start_failed: 422,
  timeout: 504,
  backend_unavailable: 503,
  shutting_down: 503,
  shell_closed: 503,
  session_closed: 409,
  config_invalid: 500,
};

/**
 * The one translator from what a handler threw to what the client sees. Only errors berth
 * understands carry their message; anything else is a 500 with a generic message (logged).
 */
export function toHttpError(err: unknown): HttpError {
  if (err instanceof HttpError) return err;
  if (isBerthError(err)) {
    const status = STATUS_BY_CODE[err.code] ?? 500;
    return new HttpError(status, err.code, err.message);
  }
  return new HttpError(500, 'internal', 'berth failed to handle this request; the server log has the details');
}

export function errorBody(e: HttpError): string {
  return JSON.stringify({ error: { code: e.code, message: e.message } });
}
