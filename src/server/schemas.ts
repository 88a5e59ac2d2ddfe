import { z } from 'zod';
import type { CallScope, CallToken } from '../scope/call-scope.js';
import { normalizeScope } from '../scope/normalize.js';
import { HttpError } from './http-error.js';

/*
 * Request shapes of the HTTP API. Objects are strict (an unknown field is an error, not ignored),
 * and the scope part is checked by the library's own `normalizeScope` after this shape check, so
 * HTTP callers and library callers meet the same rules. The tenant never comes from a request:
 * it is the bearer token's.
 */

const MAX_COMMAND_CHARS = 256 * 1024;
const MAX_STDIN_CHARS = 512 * 1024;
const MAX_PATH_CHARS = 4096;

const scopeString = z.string().max(1024);

/** The call scope a request may carry: everything but the tenant (and host workspaces). */
export const scopeFields = {
  profile: scopeString.optional().describe('agent profile (default: "default")'),
  session: scopeString.optional().describe('conversation id'),
  task: scopeString.optional().describe('task id'),
  parentTask: scopeString.optional().describe('registers `task` as a subagent of this task'),
  user: scopeString.optional().describe('end user, `platform:id`'),
};
const { parentTask: _parentTask, ...queryScopeFields } = scopeFields;

/** A whole number given in a query string. */
const wholeNumber = z.string().regex(/^[0-9]{1,15}$/, 'expected a whole number').transform(Number);

/** An in-sandbox path: no NUL or control characters, and no `..` segment (name files by their path). */
const sandboxPath = z.string().min(1).max(MAX_PATH_CHARS)
  .refine((p) => !/\p{Cc}/u.test(p), 'contains control characters')
  .refine((p) => !p.split('/').includes('..'), 'has a ".." segment; name the file by its full path')
  .describe('path inside the sandbox (absolute, or relative to the sandbox default dir)');

export const ScopeBody = z.strictObject(scopeFields);

export const ExecBody = z.strictObject({
  ...scopeFields,
  command: z.string().min(1).max(MAX_COMMAND_CHARS).describe('one shell line, run in the session\'s persistent shell'),
  timeoutSeconds: z.number().positive().max(86_400).optional(),
  workdir: z.string().min(1).max(MAX_PATH_CHARS).optional().describe('run this command in DIR (not remembered)'),
  stdin: z.string().max(MAX_STDIN_CHARS).optional(),
});

export const JobStartBody = z.strictObject({
  ...scopeFields,
  command: z.string().min(1).max(MAX_COMMAND_CHARS),
  workdir: z.string().min(1).max(MAX_PATH_CHARS).optional(),
});

export const ExportBody = z.strictObject({
  ...scopeFields,
  path: sandboxPath,
  maxBytes: z.number().int().positive().optional(),
});

export const ScopeQuery = z.strictObject(queryScopeFields);

export const JobReadQuery = z.strictObject({
  ...queryScopeFields,
  offset: wholeNumber.optional().describe('byte offset to read from (the previous nextOffset)'),
  maxBytes: wholeNumber.optional().describe('at most this many bytes (default 65536, cap 1 MiB)'),
});

export const AuditQuery = z.strictObject({
  session: scopeString.optional(),
  user: scopeString.optional(),
  limit: wholeNumber.pipe(z.number().int().min(1).max(1000)).optional(),
});

export const EgressAuditQuery = z.strictObject({
  session: scopeString.optional(),
  user: scopeString.optional(),
  decision: z.enum(['allowed', 'refused']).optional().describe('only allowed or only refused requests'),
  limit: wholeNumber.pipe(z.number().int().min(1).max(1000)).optional(),
});

export const FilePutQuery = z.strictObject({ ...queryScopeFields, path: sandboxPath });
export const FileGetQuery = z.strictObject({ ...queryScopeFields, path: sandboxPath, maxBytes: wholeNumber.optional() });
export const EmptyQuery = z.strictObject({});

export const JobIdParams = z.strictObject({
  id: z.string().regex(/^job_[0-9a-f]{16}$/, 'is not a job id (job_ and 16 hex digits)').describe('the jobId from POST /v1/jobs'),
});
export const ExportIdParams = z.strictObject({
  id: z.string().regex(/^[0-9a-f]{16}$/, 'is not an export id (16 hex digits, from POST /v1/files/export)').describe('the exportId from POST /v1/files/export'),
});

/**
 * Validates request input against `schema`; a 400 naming the fields otherwise. `tenant` and
 * `workspace` get messages of their own, since a caller may reasonably try them.
 */
export function parseInput<S extends z.ZodType>(schema: S, value: unknown, where: 'body' | 'query' | 'path'): z.output<S> {
  if (value !== null && typeof value === 'object' && !Array.isArray(value)) {
    if (Object.prototype.hasOwnProperty.call(value, 'tenant')) {
      throw new HttpError('bad_request', `${where}.tenant is not accepted: the tenant comes from the bearer token; remove it`);
    }
    if (Object.prototype.hasOwnProperty.call(value, 'workspace')) {
      throw new HttpError('bad_request', `${where}.workspace is not accepted over HTTP: a remote caller may not mount host directories`);
    }
  }
  const r = schema.safeParse(value);
  if (r.success) return r.data;
  const issues = r.error.issues.slice(0, 3).map((i) => {
    const path = i.path.length > 0 ? `${where}.${i.path.map(String).join('.')}` : where;
    return `${path}: ${i.message}`;
  });
  throw new HttpError('bad_request', issues.join('; '));
}

/** The call scope fields a request may carry. */
export interface ScopeFields {
  profile?: string | undefined;
  session?: string | undefined;
  task?: string | undefined;
  parentTask?: string | undefined;
  user?: string | undefined;
}

/** The call scope of a request: the token's tenant plus the request's fields, normalised by the library, and the token itself (for the audit). */
export function scopeOf(tenant: string, fields: ScopeFields, token?: CallToken): CallScope {
  return normalizeScope({
    tenant, profile: fields.profile, session: fields.session, task: fields.task, parentTask: fields.parentTask, user: fields.user, token,
  });
}
