import { BackendUnavailableError, BerthError, ERROR_CATEGORY, type ErrorCategory, type ErrorCode } from '../errors.js';
import { categoryOf, type HttpCode } from '../server/http-error.js';

/*
 * What a remote call's failure becomes on the client: the `BerthError` the library would have
 * thrown, with the same `code`, so code written against a local session catches the same errors.
 */

/** A berth code for each category of the codes only the HTTP layer answers with (a bad request, a missing token, too many calls). */
const CODE_OF_CATEGORY: Readonly<Partial<Record<ErrorCategory, ErrorCode>>> = {
  input: 'usage',
  refused: 'policy_refused',
  bound: 'tenant_limit',
};

/**
 * A failure a berth server answered. `code` is the library's code (an HTTP-only code becomes the
 * berth code of its category: `bad_request` is `usage`); `wireCode` and `status` are what the
 * server sent.
 */
export class RemoteCallError extends BerthError {
  constructor(code: ErrorCode, message: string, readonly wireCode: string, readonly status: number) {
    super(code, message);
  }
}

/** The error an answer `{error: {code, message}}` (or anything else a non-2xx status carried) stands for. */
export function errorOfAnswer(status: number, body: unknown, route: string): BerthError {
  const error = (body as { error?: { code?: unknown; message?: unknown } } | null)?.error;
  if (typeof error?.code === 'string' && typeof error.message === 'string') {
    return new RemoteCallError(berthCodeOf(error.code), error.message, error.code, status);
  }
  const text = typeof body === 'string' ? body.slice(0, 200) : JSON.stringify(body)?.slice(0, 200);
  const message = `${route} answered HTTP ${status} without a berth error (a proxy in between?): ${text ?? '(empty body)'}`;
  return new RemoteCallError(status >= 502 && status <= 504 ? 'backend_unavailable' : 'internal', message, 'none', status);
}

function berthCodeOf(wire: string): ErrorCode {
  if (Object.hasOwn(ERROR_CATEGORY, wire)) return wire as ErrorCode;
  // A code this client does not know (a newer server) has no category here: it is reported as it came, under `internal`.
  const category = categoryOf(wire as HttpCode) as ErrorCategory | undefined;
  return (category === undefined ? undefined : CODE_OF_CATEGORY[category]) ?? 'internal';
}

/** A request that never got an answer: the server is down, the url wrong, or the connection cut. */
export function unreachable(url: string, route: string, err: unknown): BerthError {
  const cause = (err as { cause?: { code?: unknown; message?: unknown } }).cause;
  const why = typeof cause?.code === 'string' ? cause.code : err instanceof Error ? err.message : String(err);
  return new BackendUnavailableError(`the berth server at ${url} did not answer ${route} (${why}): check the url and that \`berth serve\` runs there`, { cause: err });
}
