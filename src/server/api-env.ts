import type { HttpBindings } from '@hono/node-server';
import type { Context } from 'hono';
import type { Caller } from './caller.js';

/** What every handler sees: the raw Node request and response, and the authenticated caller. */
export type ApiEnv = { Bindings: HttpBindings; Variables: { caller: Caller } };
export type ApiContext = Context<ApiEnv>;
