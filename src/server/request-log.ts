import type { IncomingMessage, ServerResponse } from 'node:http';
import type { LogFields, LogLevel, Logger } from '../logging/logger.js';
import { pathOf } from './request.js';

/** What went wrong in a request, told by the error answer and carried on its request line. */
export interface RequestFault {
  /** `code: message` of the error answered. */
  error: string;
  /** Only for berth's own faults: what a tenant can repeat at will gets one line, no stack. */
  stack?: string | undefined;
}

/** Refusals and timeouts: the operator's business, not berth's fault. */
const WARN_STATUSES = new Set([401, 403, 408, 409, 429]);

/** The level of a request that ended with `status`: berth's faults (5xx) error, refusals and timeouts warn, the rest info. */
export function requestLevel(status: number): LogLevel {
  if (status >= 500) return 'error';
  return WARN_STATUSES.has(status) ? 'warn' : 'info';
}

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
      this.log.log(status === 0 ? 'warn' : requestLevel(status), `${fields.method} ${fields.path} ${status}`, fields);
    });
  }
}
