import type { IncomingMessage, ServerResponse } from 'node:http';

export type Method = 'GET' | 'POST' | 'PUT' | 'DELETE';

export interface RequestContext {
  req: IncomingMessage;
  res: ServerResponse;
  /** The token's tenant; '' on public routes. */
  tenant: string;
  /** The profiles the token may use; empty on public routes. */
  profiles: readonly string[];
  params: Record<string, string>;
  /** The raw query string (with its `?`), parsed strictly by the handler that needs it. */
  search: string;
}

/** A handler's answer: a value sent as JSON with `status` (default 200), or `undefined` when it wrote the response itself. */
export type Handler = (ctx: RequestContext) => Promise<{ status?: number; body: unknown } | undefined>;

export interface Route {
  method: Method | '*';
  /** `/v1/jobs/:id`: segments starting with `:` bind one non-empty segment. */
  path: string;
  /** Public routes need no token (the dashboard's page, the OpenAPI document, health). */
  auth: boolean;
  handler: Handler;
}

export type Match =
  | { kind: 'found'; route: Route; params: Record<string, string> }
  | { kind: 'method_not_allowed'; allow: string[]; auth: boolean }
  | { kind: 'not_found' };

/** A tiny router: exact segments and `:params`, first match wins, 405 when only the method differs. */
export class Router {
  private readonly table: { route: Route; segments: string[] }[] = [];

  add(route: Route): this {
    this.table.push({ route, segments: split(route.path) });
    return this;
  }

  get routes(): readonly Route[] {
    return this.table.map((t) => t.route);
  }

  match(method: string, pathname: string): Match {
    const segs = split(pathname);
    const allow: string[] = [];
    let auth = false;
    for (const { route, segments } of this.table) {
      const params = bind(segments, segs);
      if (params === undefined) continue;
      if (route.method === '*' || route.method === method) return { kind: 'found', route, params };
      allow.push(route.method);
      auth ||= route.auth;
    }
    return allow.length > 0 ? { kind: 'method_not_allowed', allow, auth } : { kind: 'not_found' };
  }
}

function split(path: string): string[] {
  return path.split('/').filter((s) => s !== '');
}

function bind(pattern: string[], actual: string[]): Record<string, string> | undefined {
  if (pattern.length !== actual.length) return undefined;
  const params: Record<string, string> = {};
  for (let i = 0; i < pattern.length; i++) {
    const p = pattern[i] as string;
    const a = actual[i] as string;
    if (p.startsWith(':')) {
      let v: string;
      try {
        v = decodeURIComponent(a);
      } catch {
        return undefined;
      }
      params[p.slice(1)] = v;
    } else if (p !== a) {
      return undefined;
    }
  }
  return params;
}
