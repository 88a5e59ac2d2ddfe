/**
 * Re-creates the vendored schema extracts from full upstream files (see README.md):
 *
 *   npx tsx test/schemas/extract.ts openapi <full api__v1_openapi.json> <out.json> <root schema>...
 *   npx tsx test/schemas/extract.ts crd <crd.yaml> <version> <out.json>
 *
 * `openapi` keeps every component schema reachable from the roots, each byte-for-byte the same
 * object as upstream (only schemas nobody reaches are dropped). `crd` keeps the
 * `openAPIV3Schema` of one served version of a CustomResourceDefinition, unmodified, with its
 * group, kind and version beside it.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { parse } from 'yaml';

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

const REF_PREFIX = '#/components/schemas/';

function refsIn(node: Json, into: Set<string>): void {
  if (Array.isArray(node)) {
    for (const item of node) refsIn(item, into);
    return;
  }
  if (node === null || typeof node !== 'object') return;
  for (const [key, value] of Object.entries(node)) {
    if (key === '$ref' && typeof value === 'string' && value.startsWith(REF_PREFIX)) into.add(value.slice(REF_PREFIX.length));
    else refsIn(value, into);
  }
}

function extractOpenApi(source: string, out: string, roots: string[]): void {
  const spec = JSON.parse(readFileSync(source, 'utf8')) as { openapi: string; info: Json; components: { schemas: Record<string, Json> } };
  const all = spec.components.schemas;
  const keep = new Set<string>();
  const queue = [...roots];
  while (queue.length > 0) {
    const name = queue.pop() as string;
    if (keep.has(name)) continue;
    const schema = all[name];
    if (schema === undefined) throw new Error(`schema ${name} is not in ${source}`);
    keep.add(name);
    const found = new Set<string>();
    refsIn(schema, found);
    queue.push(...found);
  }
  const schemas: Record<string, Json> = {};
  for (const name of Object.keys(all).sort()) if (keep.has(name)) schemas[name] = all[name] as Json;
  writeFileSync(out, `${JSON.stringify({ openapi: spec.openapi, info: spec.info, components: { schemas } }, null, 2)}\n`);
  console.log(`${out}: ${keep.size} of ${Object.keys(all).length} schemas`);
}

function extractCrd(source: string, version: string, out: string): void {
  const crd = parse(readFileSync(source, 'utf8')) as {
    spec: { group: string; names: { kind: string }; versions: { name: string; schema: { openAPIV3Schema: Json } }[] };
  };
  const v = crd.spec.versions.find((x) => x.name === version);
  if (v === undefined) throw new Error(`${source} has no version ${version}`);
  const doc = { group: crd.spec.group, version, kind: crd.spec.names.kind, openAPIV3Schema: v.schema.openAPIV3Schema };
  writeFileSync(out, `${JSON.stringify(doc, null, 2)}\n`);
  console.log(`${out}: ${crd.spec.names.kind} ${crd.spec.group}/${version}`);
}

const [mode, ...args] = process.argv.slice(2);
if (mode === 'openapi' && args.length >= 3) extractOpenApi(args[0] as string, args[1] as string, args.slice(2));
else if (mode === 'crd' && args.length === 3) extractCrd(args[0] as string, args[1] as string, args[2] as string);
else {
  console.error('usage: extract.ts openapi <spec.json> <out.json> <root>... | crd <crd.yaml> <version> <out.json>');
  process.exit(2);
}
