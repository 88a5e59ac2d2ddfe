import type { IncomingMessage, ServerResponse } from 'node:http';
import type { HttpBindings } from '@hono/node-server';
import type { ApiContext } from './api-env.js';
import type { Caller } from './caller.js';

/**
 * A request served without Hono and its Node adapter: the context its handler sees. Hono's
 * context, the web `Request` the adapter builds, its routing and middleware chain and its close
 * listener cost ~40-50 µs of every call; an authenticated route with a fixed path runs
 * the same pipeline (`createApp`) on this instead.
 */
export class DirectContext implements ApiContext {
  readonly env: HttpBindings;
  private caller: Caller | undefined;

  constructor(incoming: IncomingMessage, outgoing: ServerResponse) {
    this.env = { incoming, outgoing };
  }

  get(_key: 'caller'): Caller {
    return this.caller as Caller;
  }

  set(_key: 'caller', caller: Caller): void {
    this.caller = caller;
  }
}

// The Node adapter's own test (@hono/node-server, src/url.ts) for a request it takes without
// parsing its URL: a lower-case host name with an optional port, a target of plain characters
// without `.` or `..` segments. Such a request it cannot refuse; any other one may be refused
// (400: backslash, bad Host), so it still goes through the adapter and is answered by it.
const PLAIN_HOST = /^[a-z0-9._-]+(?::(?:[1-5]\d{3,4}|[6-9]\d{3}))?$/;
const PLAIN_TARGET = /^\/[!#$&-;=?-[\]_a-z~]*$/;
const DOT_SEGMENT = /\/\.\.?(?:[/?#]|$)/;

/** Whether the Node adapter would take this request as it is (then serving it directly changes no answer). */
export function adapterTakesAsIs(req: IncomingMessage): boolean {
  const host = req.headers.host;
  const target = req.url ?? '';
  return (host === undefined || PLAIN_HOST.test(host)) && PLAIN_TARGET.test(target) && !DOT_SEGMENT.test(target);
}
