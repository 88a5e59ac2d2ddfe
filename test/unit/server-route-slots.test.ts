import { describe, expect, it } from 'vitest';
import { holdsCallSlot, routeSpec, type RouteSpec } from '../../src/server/route-spec.js';
import { ROUTES } from '../../src/server/routes.js';

/*
 * The call-slot rule lives with each route: every route says whether its requests hold one of
 * the tenant's `limits.concurrentCalls` slots, and the app reads only that.
 */

const routes = Object.entries(ROUTES) as [string, RouteSpec][];

describe('RouteSpec.callSlot', () => {
  it('a route cannot be declared without saying whether it holds a call slot', () => {
    // @ts-expect-error callSlot is required: `npm run typecheck` fails here if it ever becomes optional.
    const forgot: RouteSpec = routeSpec({ method: 'get', path: '/v1/new', doc: { responses: {} } });
    expect(forgot.callSlot).toBeUndefined();
  });

  it('every route says it, as a yes, a no or the methods that hold one', () => {
    for (const [id, spec] of routes) {
      expect(typeof spec.callSlot === 'boolean' || Array.isArray(spec.callSlot), `${id} says nothing of call slots`).toBe(true);
      if (Array.isArray(spec.callSlot)) expect(spec.method, `${id}: a method list is for an \`all\` route`).toBe('all');
    }
  });

  it('routes with no tenant hold none: the public ones and /metrics', () => {
    for (const [id, spec] of routes) {
      if (spec.public === true || spec.metricsOnly === true) expect(spec.callSlot, id).toBe(false);
    }
  });

  it('standing streams hold none: the overview stream and an MCP session\'s GET stream; every other request does', () => {
    const free = routes.flatMap(([id, spec]) => {
      const methods = spec.method === 'all' ? spec.methods ?? [] : [spec.method];
      return methods.filter((m) => !holdsCallSlot(spec, m.toUpperCase())).map((m) => `${m.toUpperCase()} ${id}`);
    });
    expect(free.sort()).toEqual(['GET health', 'GET mcp', 'GET metrics', 'GET openapi', 'GET overviewStream', 'GET page']);
    expect(holdsCallSlot(ROUTES.mcp, 'POST')).toBe(true);
    expect(holdsCallSlot(ROUTES.mcp, 'DELETE')).toBe(true);
    expect(holdsCallSlot(ROUTES.exec, 'POST')).toBe(true);
  });
});
