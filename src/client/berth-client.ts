import { Whoami } from '../server/response-schemas.js';
import { RemoteSession } from './remote-session.js';
import type { RemoteScope } from './remote-types.js';
import { Transport, type TransportOptions } from './transport.js';

export type BerthClientOptions = TransportOptions;

/**
 * A typed client for a remote `berth serve`: `session(scope)` is the library's
 * `broker.session(scope)` over HTTP. The tenant is the token's; the scope names the rest.
 *
 * @example
 * ```ts
 * import { BerthClient } from 'berth/client';
 * const berth = new BerthClient({ url: 'http://127.0.0.1:7878', token: process.env.BERTH_TOKEN! });
 * await using chat = berth.session({ session: 'chat-42', user: 'telegram:123' });
 * const r = await chat.exec('echo hello > note.txt && ls');
 * ```
 */
export class BerthClient {
  private readonly http: Transport;

  constructor(opts: BerthClientOptions) {
    this.http = new Transport(opts);
  }

  /** The server's base URL. */
  get url(): string {
    return this.http.url;
  }

  /** A session of the token's tenant; no request is sent until its first call. */
  session(scope: RemoteScope = {}): RemoteSession {
    return new RemoteSession(this.http, { ...scope });
  }

  /** The token's tenant and the profiles it may use. */
  whoami(): Promise<{ tenant: string; profiles: string[] }> {
    return this.http.json('whoami', Whoami);
  }
}
