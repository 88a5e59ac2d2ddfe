/**
 * `berth/mcp`: berth's tools (terminal, process, read_file, write_file, export_file) as a Model
 * Context Protocol server, over stdio or streamable HTTP. Imported apart from the core (`berth`),
 * which does not load the MCP SDK.
 *
 * @example
 * ```ts
 * import { Broker } from 'berth';
 * import { serveMcpStdio } from 'berth/mcp';
 * await using broker = await Broker.open();
 * await serveMcpStdio(broker, { session: 'chat-42' });
 * ```
 */
export { createMcpServer } from './server/mcp/server.js';
export type { McpServerInfo } from './server/mcp/server.js';
export { createMcpHttpHandler } from './server/mcp/http.js';
export type { McpHttpHandler, McpHttpOptions } from './server/mcp/http.js';
export { serveMcpStdio } from './server/mcp/stdio.js';
export type { StdioOptions as McpStdioOptions } from './server/mcp/stdio.js';
export { describeSandbox } from './server/mcp/sandbox-description.js';
export type { SandboxDescription } from './server/mcp/sandbox-description.js';
