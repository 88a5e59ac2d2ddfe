import { describe, expect, it } from 'vitest';
import { modulesLoadedBy } from '../helpers/loaded-modules.js';

/*
 * What each entry point of the built package loads in a fresh node, by the package's own name
 * (`import('berth')` resolves through package.json `exports`, as a user's import does).
 */

const isServer = (url: string): boolean => /\/dist\/(server\/|server\.js$|mcp\.js$)/.test(url);
const isMcpSdk = (url: string): boolean => url.includes('/@modelcontextprotocol/sdk/');
const importing = (specifier: string): string[] => ['--input-type=module', '-e', `await import(${JSON.stringify(specifier)});`];

describe('entry points of the built package', () => {
  it('importing "berth" loads the core and no module of the server or the MCP SDK', async () => {
    const r = await modulesLoadedBy(importing('berth'));
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    // The hook saw the core load: an empty list would pass the checks below for nothing.
    expect(r.modules.some((u) => u.endsWith('/dist/index.js'))).toBe(true);
    expect(r.modules.some((u) => u.endsWith('/dist/broker/broker.js'))).toBe(true);
    expect(r.modules.filter(isServer)).toEqual([]);
    expect(r.modules.filter(isMcpSdk)).toEqual([]);
  });

  it('"berth/server" loads the server, and "berth/mcp" the MCP SDK (the same check sees them)', async () => {
    const server = await modulesLoadedBy(importing('berth/server'));
    expect(server.code).toBe(0);
    expect(server.modules.some((u) => u.endsWith('/dist/server/server.js'))).toBe(true);
    const mcp = await modulesLoadedBy(importing('berth/mcp'));
    expect(mcp.code).toBe(0);
    expect(mcp.modules.some(isMcpSdk)).toBe(true);
    expect(mcp.modules.some((u) => u.endsWith('/dist/server/server.js'))).toBe(false);
  });

  it('"berth/client" loads the server\'s schemas and nothing of the broker, the engines or the server itself; "berth/ai-sdk" loads no SDK', async () => {
    const client = await modulesLoadedBy(importing('berth/client'));
    expect(client.stderr).toBe('');
    expect(client.code).toBe(0);
    expect(client.modules.some((u) => u.endsWith('/dist/server/response-schemas.js'))).toBe(true);
    const heavy = (u: string): boolean => /\/dist\/(broker|backends|shell|setup)\/|\/dist\/server\/(server|app|routes)\.js$|\/node_modules\/(hono|@hono|dockerode|better-sqlite3)\//.test(u);
    expect(client.modules.filter(heavy)).toEqual([]);
    const tools = await modulesLoadedBy(importing('berth/ai-sdk'));
    expect(tools.code).toBe(0);
    expect(tools.modules.some((u) => u.endsWith('/dist/ai-sdk/berth-tools.js'))).toBe(true);
    expect(tools.modules.filter((u) => heavy(u) || /\/node_modules\/(ai|@ai-sdk)\//.test(u) || u.includes('/dist/client/'))).toEqual([]);
  });
});
