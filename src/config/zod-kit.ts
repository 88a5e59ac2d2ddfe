import * as z from 'zod';

/*
 * The pieces every config section is written with (berth's own keys and each backend module's
 * section): every key optional and without a default, so the cross-field rules can tell a written
 * value from a default, and each error phrased as what was expected.
 */

/** Tenant names as call scopes have them (scope/normalize.ts). */
export const TENANT_NAME = /^[A-Za-z0-9._-]{1,64}$/;

/** Issues whose message is already a whole sentence (not an "expected ..." phrase). */
export const FULL = { full: true } as const;

function quoteList(values: readonly string[]): string {
  return values.map((v) => `"${v}"`).join(', ');
}

export function integer(min: number, max?: number) {
  const expected =
    max === undefined ? `an integer of at least ${min}` : `an integer between ${min} and ${max}`;
  const base = z.number({ error: expected }).int({ error: expected }).min(min, { error: expected });
  return (max === undefined ? base : base.max(max, { error: expected })).optional();
}

export const positiveInteger = () =>
  z
    .number({ error: 'a positive integer' })
    .int({ error: 'a positive integer' })
    .positive({ error: 'a positive integer' })
    .optional();

export const positiveNumber = () =>
  z.number({ error: 'a positive number' }).positive({ error: 'a positive number' }).optional();

export const bool = () => z.boolean({ error: 'true or false' }).optional();

export function oneOf<const T extends readonly [string, ...string[]]>(values: T) {
  return z.enum(values, { error: `one of ${quoteList(values)}` }).optional();
}

/** A YAML section written with nothing under it (`env:`) parses as null: treat it as empty. */
export function section<S extends z.core.$ZodLooseShape>(shape: S) {
  return z
    .preprocess((v) => (v === null ? {} : v), z.strictObject(shape, { error: 'a mapping of keys' }))
    .optional();
}

export function isCleanAbsolute(p: string): boolean {
  return p.startsWith('/') && !p.split('/').includes('..');
}

export const absolutePath = (what: string) =>
  z.string({ error: `${what} (an absolute path)` }).refine((p) => isCleanAbsolute(p), {
    error: `${what} (an absolute path without ".." segments)`,
  });

/** The keys of a written section that have a value (zod keeps written `undefined`s out anyway). */
export function definedOnly<T extends object>(section: T | undefined): Partial<T> {
  return Object.fromEntries(Object.entries(section ?? {}).filter(([, v]) => v !== undefined)) as Partial<T>;
}
