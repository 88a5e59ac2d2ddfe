import type { RouteId } from '../server/routes.js';

/*
 * The routes of the server's published OpenAPI document (`GET /v1/openapi.json`) that the client
 * calls, keyed by the server's own route ids: a route renamed or removed on the server fails the
 * compiler here, and a test checks each method and path against the document a real server serves.
 */

export interface Operation {
  method: 'GET' | 'POST' | 'PUT' | 'DELETE';
  /** OpenAPI's spelling: `{id}` is a path parameter. */
  path: string;
}

export const OPERATIONS = {
  whoami: { method: 'GET', path: '/v1/whoami' },
  explain: { method: 'POST', path: '/v1/explain' },
  exec: { method: 'POST', path: '/v1/exec' },
  execStream: { method: 'POST', path: '/v1/exec/stream' },
  closeSession: { method: 'POST', path: '/v1/sessions/close' },
  startJob: { method: 'POST', path: '/v1/jobs' },
  listJobs: { method: 'GET', path: '/v1/jobs' },
  readJob: { method: 'GET', path: '/v1/jobs/{id}' },
  killJob: { method: 'DELETE', path: '/v1/jobs/{id}' },
  upload: { method: 'PUT', path: '/v1/files' },
  readFile: { method: 'GET', path: '/v1/files' },
  exportFile: { method: 'POST', path: '/v1/files/export' },
  download: { method: 'GET', path: '/v1/files/exports/{id}' },
} as const satisfies Partial<Record<RouteId, Operation>>;

export type OperationId = keyof typeof OPERATIONS;
