import type { IncomingMessage } from 'node:http';
import type { RouteConfig } from '@hono/zod-openapi';
import type { z } from 'zod';
import { bodyOf, parseJsonBody, parseQuery, searchOf } from './request.js';
import { parseInput } from './schemas.js';

/** Largest JSON body (a command, a scope). Uploads (`PUT /v1/files`) are streamed, capped by `files.maxBytes`. */
const MAX_JSON_BYTES = 1024 * 1024;

export type HttpMethod = 'get' | 'post' | 'put' | 'delete';

type Fields = z.ZodObject | undefined;
type Schema = z.ZodType | undefined;

/**
 * One route of the HTTP API, as data: where it is, who may call it, and the zod schemas of its
 * input. The same object registers the route on the app and describes it in the OpenAPI
 * document, and its schemas are the ones that check each request, so the three cannot drift.
 */
export interface RouteSpec<P extends Fields = Fields, Q extends Fields = Fields, B extends Schema = Schema> {
  method: HttpMethod | 'all';
  /** OpenAPI's spelling, `/v1/jobs/{id}`. */
  path: string;
  /** Answered without a token (the page, health, the OpenAPI document). */
  public?: true;
  /** Answered to a metrics token only (`berth token create --metrics`); a tenant token gets 403. */
  metricsOnly?: true;
  /**
   * Whether a request holds one of its tenant's `limits.concurrentCalls` slots until its handler
   * settled and its answer closed (a client that hangs up does not free the slot of work still
   * running for it): `true` for a call; `false` for what is none (a public or metrics route, a
   * standing stream bounded by a limit of its own); for `all`, the methods that hold one.
   * Required: a new route says which it is.
   */
  callSlot: boolean | readonly HttpMethod[];
  params?: P;
  /** Checked against the query string, parsed strictly (`parseQuery`). */
  query?: Q;
  /** A JSON body: read up to `MAX_JSON_BYTES`, strict UTF-8, then checked against this schema. */
  body?: B;
  /** The rest of the OpenAPI operation: summary, responses, a raw body's media type. */
  doc: Omit<RouteConfig, 'method' | 'path'>;
  /** For `all`: the methods the document lists. */
  methods?: readonly HttpMethod[];
}

/** Declares a route; the identity function that lets TypeScript infer the schemas' types. */
export function routeSpec<P extends Fields = undefined, Q extends Fields = undefined, B extends Schema = undefined>(
  spec: RouteSpec<P, Q, B>,
): RouteSpec<P, Q, B> {
  return spec;
}

type Out<T> = T extends z.ZodType ? z.output<T> : undefined;

/** A request's checked input, typed by its route's schemas. */
export interface RouteInput<S> {
  params: S extends RouteSpec<infer P, Fields, Schema> ? Out<P> : never;
  query: S extends RouteSpec<Fields, infer Q, Schema> ? Out<Q> : never;
  body: S extends RouteSpec<Fields, Fields, infer B> ? Out<B> : never;
}

/** Whether a request of `method` (`GET`, `post`, ...) on this route holds a call slot (see `RouteSpec.callSlot`). */
export function holdsCallSlot(spec: RouteSpec, method: string): boolean {
  return typeof spec.callSlot === 'boolean' ? spec.callSlot : spec.callSlot.includes(method.toLowerCase() as HttpMethod);
}

/** Hono's spelling of a path: `/v1/jobs/:id`. */
export function honoPath(path: string): string {
  return path.replace(/\{(\w+)\}/g, ':$1');
}

/**
 * Reads and checks a request's input in a fixed order: path parameters, the query string, then
 * the JSON body (the body is read only when everything before it passed). 400 names the fields.
 */
export async function readInput<S extends RouteSpec>(spec: S, req: IncomingMessage, params: Record<string, string>): Promise<RouteInput<S>> {
  const input = {
    params: spec.params === undefined ? undefined : parseInput(spec.params, params, 'path'),
    query: spec.query === undefined ? undefined : parseInput(spec.query, parseQuery(searchOf(req.url ?? '')), 'query'),
    body: spec.body === undefined ? undefined : parseInput(spec.body, parseJsonBody(req, await bodyOf(req, MAX_JSON_BYTES)), 'body'),
  };
  return input as RouteInput<S>;
}

/** The OpenAPI operations of a route (one per method). */
export function operationsOf(spec: RouteSpec): RouteConfig[] {
  const request: NonNullable<RouteConfig['request']> = { ...spec.doc.request };
  if (spec.params !== undefined) request.params = spec.params;
  if (spec.query !== undefined) request.query = spec.query;
  if (spec.body !== undefined) request.body = { required: true, content: { 'application/json': { schema: spec.body } } };
  const methods = spec.method === 'all' ? spec.methods ?? [] : [spec.method];
  return methods.map((method) => ({
    ...spec.doc, method, path: spec.path, request, ...(spec.public === true ? { security: [] } : {}),
  }));
}
