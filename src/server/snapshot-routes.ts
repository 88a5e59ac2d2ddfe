import type { RouteConfig } from '@hono/zod-openapi';
import { z } from 'zod';
import type { Broker } from '../broker/broker.js';
import type { CallScope } from '../scope/call-scope.js';
import type { Answers } from './answer.js';
import type { ApiContext } from './api-env.js';
import { routeSpec, type RouteInput } from './route-spec.js';
import { scopeFields, type ScopeFields } from './schemas.js';

/*
 * The snapshot routes of the HTTP API: snapshots of a call's sandbox, restore and fork, each
 * through the broker's snapshot calls (the tenant is the token's, as everywhere).
 */

type Responses = RouteConfig['responses'];
const ref = (name: string) => ({ $ref: `#/components/responses/${name}` });
const json = (description: string, schema: z.ZodType): Responses[string] => ({ description, content: { 'application/json': { schema } } });
const errors: Responses = {
  400: ref('BadRequest'), 401: ref('Unauthorized'), 403: ref('Error'), 404: ref('Error'), 409: ref('Error'), 422: ref('Error'),
  429: ref('TooMany'), 500: ref('Error'), 503: ref('Error'),
};

const snapshotName = z.string().regex(/^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/, 'is not a snapshot name (1 to 64 letters, digits, ".", "_" or "-", starting with a letter or digit)');
const { parentTask: _parentTask, ...queryScopeFields } = scopeFields;

const SnapshotCreateBody = z.strictObject({ ...scopeFields, name: snapshotName.optional().describe('default: snap-<time>') });
const SnapshotListQuery = z.strictObject(queryScopeFields);
const SnapshotNameParams = z.strictObject({ name: snapshotName });
const SnapshotRestoreBody = z.strictObject(scopeFields);
const ForkBody = z.strictObject({
  ...scopeFields,
  toSession: z.string().min(1).max(1024).describe('the new session the fork is for'),
  from: snapshotName.optional().describe('a snapshot of the source sandbox to start from; default: its state now'),
});

const Snapshot = z.object({
  name: z.string(),
  sandboxKey: z.string(),
  profile: z.string(),
  session: z.string().nullable(),
  user: z.string().nullable(),
  backend: z.string(),
  bytes: z.number().int().describe('what it takes on the server, as limits.snapshotBytes counts it'),
  createdMs: z.number().int(),
}).meta({ id: 'Snapshot' });
const Restored = z.object({
  name: z.string(), sandboxKey: z.string(), cwd: z.string().nullable().describe('where the restored shell resumes (the snapshot\'s cwd)'),
}).meta({ id: 'Restored' });
const Forked = z.object({
  session: z.string(), sandboxKey: z.string(),
  from: z.string().nullable().describe('the snapshot it started from; null: the source\'s state at the fork'),
  cwd: z.string().nullable(),
}).meta({ id: 'Forked' });

export const SNAPSHOT_ROUTES = {
  createSnapshot: routeSpec({
    method: 'post', path: '/v1/snapshots', body: SnapshotCreateBody, callSlot: true,
    doc: {
      summary: 'Snapshot the session\'s sandbox: its files and each shell\'s state (cwd, exported variables). Refused (409 sandbox_busy) while a ' +
        'command or job runs in it, and (403) when a file in it holds a granted secret\'s value; counts against limits.snapshots and limits.snapshotBytes (429)',
      responses: { 201: json('made', Snapshot), ...errors },
    },
  }),
  listSnapshots: routeSpec({
    method: 'get', path: '/v1/snapshots', query: SnapshotListQuery, callSlot: true,
    doc: {
      summary: 'The tenant\'s snapshots of the token\'s profiles, oldest first; with a scope field, those of that scope\'s sandbox only',
      responses: { 200: json('snapshots', Snapshot.array()), ...errors },
    },
  }),
  removeSnapshot: routeSpec({
    method: 'delete', path: '/v1/snapshots/{name}', params: SnapshotNameParams, query: SnapshotListQuery, callSlot: true,
    doc: { summary: 'Remove a snapshot of the scope\'s sandbox', responses: { 200: json('whether it was there', z.object({ removed: z.boolean() })), ...errors } },
  }),
  restoreSnapshot: routeSpec({
    method: 'post', path: '/v1/snapshots/{name}/restore', params: SnapshotNameParams, body: SnapshotRestoreBody, callSlot: true,
    doc: {
      summary: 'Put the scope\'s sandbox back to a snapshot (checked first); one that fails changes nothing and says so',
      responses: { 200: json('restored', Restored), ...errors },
    },
  }),
  fork: routeSpec({
    method: 'post', path: '/v1/fork', body: ForkBody, callSlot: true,
    doc: {
      summary: 'A new session whose sandbox starts from the scope\'s sandbox now (or its snapshot `from`), its shell in the source\'s cwd with its ' +
        'variables; refused when toSession resolves to the same sandbox or has one already',
      responses: { 201: json('forked', Forked), ...errors },
    },
  }),
};

type SnapshotRoutes = typeof SNAPSHOT_ROUTES;

/** The snapshot routes' handlers; `scoped` is the API's scope check (the token's tenant and profiles, the host rule). */
export function snapshotHandlers(broker: Broker, answer: Answers, scoped: (c: ApiContext, fields: ScopeFields) => CallScope): {
  [K in keyof SnapshotRoutes]: (c: ApiContext, input: RouteInput<SnapshotRoutes[K]>) => Promise<Response>
} {
  const json = answer.json;
  return {
    createSnapshot: async (c, { body: { name, ...fields } }) => json(c, await broker.snapshots.create(scoped(c, fields), { name }), 201),
    listSnapshots: async (c, { query }) => {
      const { tenant, profiles } = c.get('caller');
      const filtered = Object.values(query).some((v) => v !== undefined);
      const list = broker.snapshots.list(tenant, filtered ? scoped(c, query) : undefined);
      return json(c, list.filter((s) => profiles.includes(s.profile)));
    },
    removeSnapshot: async (c, { params, query }) => json(c, { removed: await broker.snapshots.remove(scoped(c, query), params.name) }),
    restoreSnapshot: async (c, { params, body }) => json(c, await broker.snapshots.restore(scoped(c, body), params.name)),
    fork: async (c, { body: { toSession, from, ...fields } }) => json(c, await broker.snapshots.fork(scoped(c, fields), { toSession, from }), 201),
  };
}
