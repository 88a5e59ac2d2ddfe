import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Ajv, type ValidateFunction } from 'ajv';
import { labelErrors, annotationErrors, objectMetaErrors } from './object-meta.js';

/*
 * Checks a manifest against the vendored schemas (README.md) the way the API server's strict
 * field validation does: an unknown field anywhere is an error, as are wrong types, missing
 * required fields and a metadata block the API server would refuse (object-meta.ts).
 *
 * The vendored files stay unmodified; at load time every object schema that lists `properties`
 * and says nothing of other keys (no `additionalProperties`, no
 * `x-kubernetes-preserve-unknown-fields`) is closed with `additionalProperties: false`: that is
 * what the API server's decoder does with `fieldValidation=Strict` (built-in types) and what
 * structural pruning plus strict validation do for custom resources. A custom resource's
 * `metadata` (the CRD says only `type: object`) is checked as the core ObjectMeta, as the API
 * server does. Not checked: CEL rules (`x-kubernetes-validations`) and the API server's
 * per-type Go validation beyond metadata (e.g. that a container name is unique).
 */

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
type JsonObject = { [key: string]: Json };

const HERE = fileURLToPath(new URL('.', import.meta.url));
export const K8S_DIR = join(HERE, 'kubernetes-1.35');
export const AGENT_SANDBOX_DIR = join(HERE, 'agent-sandbox-v0.5.6');

const OPENAPI_FILES = {
  'k8s:api/v1': 'api__v1_openapi.json',
  'k8s:apis/networking.k8s.io/v1': 'apis__networking.k8s.io__v1_openapi.json',
  'k8s:apis/rbac.authorization.k8s.io/v1': 'apis__rbac.authorization.k8s.io__v1_openapi.json',
} as const;

const CRD_FILES = [
  'agents.x-k8s.io_sandboxes.v1beta1.json',
  'extensions.agents.x-k8s.io_sandboxclaims.v1beta1.json',
  'extensions.agents.x-k8s.io_sandboxtemplates.v1beta1.json',
  'extensions.agents.x-k8s.io_sandboxwarmpools.v1beta1.json',
] as const;

const OBJECT_META_REF = 'k8s:api/v1#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta';

function isObject(v: Json | undefined): v is JsonObject {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}

/** A deep copy of `schema` with every open-by-omission object closed (see the comment above). */
export function closeObjects(schema: Json): Json {
  if (Array.isArray(schema)) return schema.map(closeObjects);
  if (!isObject(schema)) return schema;
  const out: JsonObject = {};
  for (const [key, value] of Object.entries(schema)) {
    if (key === 'properties' && isObject(value)) {
      out[key] = Object.fromEntries(Object.entries(value).map(([name, sub]) => [name, closeObjects(sub)]));
    } else if (key === 'items' || key === 'additionalProperties' || key === 'not') {
      out[key] = closeObjects(value);
    } else if ((key === 'allOf' || key === 'anyOf' || key === 'oneOf') && Array.isArray(value)) {
      out[key] = value.map(closeObjects);
    } else {
      out[key] = value;
    }
  }
  if (isObject(schema['properties']) && schema['additionalProperties'] === undefined && schema['x-kubernetes-preserve-unknown-fields'] !== true) {
    out['additionalProperties'] = false;
  }
  return out;
}

function readJson(path: string): JsonObject {
  return JSON.parse(readFileSync(path, 'utf8')) as JsonObject;
}

export interface ManifestValidator {
  /** Every problem found, as `path: message` lines; empty when the manifest is valid. */
  errors(manifest: unknown): string[];
  /** Throws with every problem listed when the manifest is not valid. */
  assertValid(manifest: unknown): void;
  /** The `apiVersion/Kind` pairs it has a schema for. */
  readonly kinds: readonly string[];
}

function gvkKey(apiVersion: string, kind: string): string {
  return `${apiVersion}/${kind}`;
}

/** Loads the vendored schemas into one validator; each kind's schema is compiled on first use. */
export function loadValidator(): ManifestValidator {
  const ajv = new Ajv({ strict: false, allErrors: true, validateFormats: true });
  const int = (bits: number) => (n: number): boolean => Number.isInteger(n) && n >= -(2 ** (bits - 1)) && n < 2 ** (bits - 1);
  ajv.addFormat('int32', { type: 'number', validate: int(32) });
  ajv.addFormat('int64', { type: 'number', validate: int(64) });
  ajv.addFormat('date-time', { type: 'string', validate: (s: string) => !Number.isNaN(Date.parse(s)) });
  ajv.addFormat('int-or-string', true);
  ajv.addFormat('byte', { type: 'string', validate: (s: string) => /^[A-Za-z0-9+/]*={0,2}$/.test(s) });
  ajv.addFormat('double', true);

  // Compiled on first use: the agent-sandbox schemas alone take seconds.
  const sources = new Map<string, object>();
  const compiled = new Map<string, ValidateFunction>();
  const rootFor = (key: string): ValidateFunction | undefined => {
    const source = sources.get(key);
    if (source === undefined) return undefined;
    let fn = compiled.get(key);
    if (fn === undefined) {
      fn = ajv.compile(source);
      compiled.set(key, fn);
    }
    return fn;
  };
  for (const [id, file] of Object.entries(OPENAPI_FILES)) {
    const doc = readJson(join(K8S_DIR, file));
    const schemas = (doc['components'] as JsonObject)['schemas'] as JsonObject;
    const closed = Object.fromEntries(Object.entries(schemas).map(([name, s]) => [name, closeObjects(s)]));
    ajv.addSchema({ $id: id, components: { schemas: closed } });
    for (const [name, schema] of Object.entries(schemas)) {
      const gvks = isObject(schema) ? schema['x-kubernetes-group-version-kind'] : undefined;
      if (!Array.isArray(gvks)) continue;
      for (const g of gvks) {
        if (!isObject(g)) continue;
        const apiVersion = g['group'] === '' ? String(g['version']) : `${String(g['group'])}/${String(g['version'])}`;
        sources.set(gvkKey(apiVersion, String(g['kind'])), { $ref: `${id}#/components/schemas/${name}` });
      }
    }
  }
  for (const file of CRD_FILES) {
    const doc = readJson(join(AGENT_SANDBOX_DIR, file));
    const schema = closeObjects(doc['openAPIV3Schema'] as Json) as JsonObject;
    const props = schema['properties'] as JsonObject;
    props['metadata'] = { $ref: OBJECT_META_REF };
    sources.set(gvkKey(`${String(doc['group'])}/${String(doc['version'])}`, String(doc['kind'])), schema);
  }

  const errors = (manifest: unknown): string[] => {
    if (!isObject(manifest as Json)) return ['the manifest is not an object'];
    const m = manifest as JsonObject;
    const key = gvkKey(String(m['apiVersion']), String(m['kind']));
    const validate = rootFor(key);
    if (validate === undefined) return [`no vendored schema for apiVersion ${String(m['apiVersion'])} kind ${String(m['kind'])}`];
    const found: string[] = [];
    if (!validate(manifest)) {
      for (const e of validate.errors ?? []) {
        const extra = e.keyword === 'additionalProperties' ? ` (unknown field ${JSON.stringify((e.params as { additionalProperty: string }).additionalProperty)})` : '';
        found.push(`${e.instancePath || '/'}: ${e.message ?? e.keyword}${extra}`);
      }
    }
    found.push(...objectMetaErrors(m['metadata']));
    found.push(...embeddedMetaErrors(m));
    return found;
  };
  return {
    kinds: [...sources.keys()].sort(),
    errors,
    assertValid(manifest: unknown): void {
      const found = errors(manifest);
      if (found.length > 0) throw new Error(`invalid manifest:\n  ${found.join('\n  ')}`);
    },
  };
}

/** Labels and annotations of embedded pod templates (Sandbox.spec.podTemplate), which the API server also checks. */
function embeddedMetaErrors(m: JsonObject): string[] {
  const spec = isObject(m['spec']) ? m['spec'] : undefined;
  const template = spec !== undefined && isObject(spec['podTemplate']) ? spec['podTemplate'] : undefined;
  const meta = template !== undefined && isObject(template['metadata']) ? template['metadata'] : undefined;
  if (meta === undefined) return [];
  return [...labelErrors(meta['labels'], 'spec.podTemplate.metadata.labels'), ...annotationErrors(meta['annotations'], 'spec.podTemplate.metadata.annotations')];
}
