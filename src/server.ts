/**
 * `berth/server`: the HTTP server (`/v1`, `/mcp` over streamable HTTP and the dashboard) and the
 * bearer tokens that admit its callers. Imported apart from the core (`berth`), which stays free
 * of HTTP and of the MCP SDK.
 *
 * @example
 * ```ts
 * import { Broker } from 'berth';
 * import { BerthServer, TokenStore } from 'berth/server';
 * const broker = await Broker.open();
 * const tokens = TokenStore.sharing(broker); // the broker's connection to the state: the cheapest lookup per request
 * const server = await BerthServer.start({ broker, tokens, host: '127.0.0.1', port: 7878 });
 * ```
 */
export { BerthServer } from './server/server.js';
export type { ServerOptions } from './server/server.js';
export { TokenStore } from './server/tokens.js';
export type { TokenEntry, TokenGrant, TokenStoreOptions } from './server/tokens.js';
export { ProfileForbiddenError, HostBackendForbiddenError } from './server/caller.js';
export type { Caller } from './server/caller.js';
export { openApiDocument } from './server/routes.js';
