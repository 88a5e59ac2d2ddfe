import type { IncomingMessage, ServerResponse } from 'node:http';
import type { ErrorCategory } from '../errors.js';
import type { LogFields, LogLevel, Logger } from '../logging/logger.js';
import { categoryOf, HTTP_CODES, statusOf, type HttpCode } from './http-error.js';
import { pathOf } from './request.js';

/** What went wrong in a request, told by the error answer and carried on its request line. */
export interface RequestFault {
  /** The code answered: its category picks the line's level. */
  code: HttpCode;
  /** `code: message`, only for berth's own faults (a refusal's message is the caller's business). */
  error?: string | undefined;
  /** Only for berth's bugs: what a tenant can repeat at will gets one line, no stack. */
  stack?: string | undefined;
}

/**
 * The level of each category on a request line: what the operator must act on (berth's faults and
 * bugs, a config that cannot be honoured) is an error; refusals, bounds and what was gone or timed
 * out are warnings; a caller's own mistake (bad input, a name that is not there, a backend that
 * cannot do it) is an ordinary request.
 */
const LEVEL_OF_CATEGORY: Readonly<Record<ErrorCategory, LogLevel>> = {
  input: 'info',
  not_found: 'info',
  unsupported: 'info',
  refused: 'warn',
  bound: 'warn',
  gone: 'warn',
  config: 'error',
  fault: 'error',
  bug: 'error',
};

/** Codes whose level says more than their category's. */
const LEVEL_OF_CODE: Readonly<Partial<Record<HttpCode, LogLevel>>> = {
  // An engine or host berth cannot reach: gone for the caller (retrying may work), the operator's to mend.
  backend_unavailable: 'error',
};

const SEVERITY: Readonly<Record<LogLevel, number>> = { debug: 0, info: 1, warn: 2, error: 3 };

/**
 * The level of a request that ended with `status`, by the category of the code it answered; an
 * answer written without a recorded code (the MCP transport's, a framework's 404) by the codes
 * that answer with that status (the most severe of their levels); success info; a response cut
 * off before its head (status 0) warn.
 */
export function requestLevel(status: number, code?: HttpCode): LogLevel {
  if (code !== undefined) return levelOf(code);
  if (status === 0) return 'warn';
  if (status < 400) return 'info';
  return LEVEL_OF_STATUS.get(status) ?? (status >= 500 ? 'error' : 'info');
}

function levelOf(code: HttpCode): LogLevel {
  return LEVEL_OF_CODE[code] ?? LEVEL_OF_CATEGORY[categoryOf(code)];
}

/** For an answer without a recorded code: the most severe level of the codes that answer with its status. */
const LEVEL_OF_STATUS: ReadonlyMap<number, LogLevel> = HTTP_CODES.reduce((m, c) => {
  const [status, level] = [statusOf(c), levelOf(c)];
  const had = m.get(status);
  return m.set(status, had !== undefined && SEVERITY[had] >= SEVERITY[level] ? had : level);
}, new Map<number, LogLevel>());

/**
 * One line per HTTP request when its response ends: method, path (never the query), tenant,
 * status, duration and a request id; never a header, a token or a body (a command text).
 *
 * @example
 * const requests = new RequestLog(logger, (req) => callers.get(req)?.tenant);
 * http.on('request', (req, res) => requests.track(req, res));
 */
export class RequestLog {
  private next = 0;
  readonly faults = new WeakMap<IncomingMessage, RequestFault>();

  constructor(private readonly log: Logger, private readonly tenantOf: (req: IncomingMessage) => string | undefined) {}

  track(req: IncomingMessage, res: ServerResponse): void {
    if (!this.log.wants('error')) return;
    const started = process.hrtime.bigint();
    const id = ++this.next;
    res.once('close', () => {
      const status = res.headersSent ? res.statusCode : 0;
      const fault = this.faults.get(req);
      const fields: LogFields = {
        id, method: req.method ?? '', path: pathOf(req.url ?? ''), tenant: this.tenantOf(req), status,
        ms: Math.round(Number(process.hrtime.bigint() - started) / 10_000) / 100,
        ...(res.writableFinished ? {} : { aborted: true }),
        ...fault,
      };
      this.log.log(requestLevel(status, fault?.code), `${fields.method} ${fields.path} ${status}`, fields);
    });
  }
}
