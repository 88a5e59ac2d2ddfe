import type { HttpBindings } from '@hono/node-server';
import type { Caller } from './caller.js';

/** Hono's environment of the app: the raw Node request and response, and the authenticated caller. */
export type ApiEnv = { Bindings: HttpBindings; Variables: { caller: Caller } };

/**
 * What every handler sees of a request: the raw Node request and response, and the authenticated
 * caller. Hono's context is one; a request served without Hono (`direct-route.ts`) has its own.
 */
export interface ApiContext {
  readonly env: HttpBindings;
  get(key: 'caller'): Caller;
  set(key: 'caller', caller: Caller): void;
}
