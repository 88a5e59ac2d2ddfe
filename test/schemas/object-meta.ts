/**
 * The object-metadata rules the API server enforces beyond the OpenAPI schema (apimachinery's
 * `ValidateObjectMeta`, `ValidateLabels`, `ValidateAnnotations`, `IsDNS1123Subdomain`), transcribed
 * for the checks berth's manifests meet: names, label keys and values, annotation keys and size.
 * Used by the manifest validator and by the stand-in API server.
 */

const DNS1123_LABEL = '[a-z0-9]([-a-z0-9]*[a-z0-9])?';
const DNS1123_SUBDOMAIN_RE = new RegExp(`^${DNS1123_LABEL}(\\.${DNS1123_LABEL})*$`);
const DNS1123_SUBDOMAIN_MAX = 253;
const QUALIFIED_NAME_RE = /^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$/;
const QUALIFIED_NAME_MAX = 63;
const LABEL_VALUE_RE = /^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$/;
const LABEL_VALUE_MAX = 63;
const ANNOTATIONS_TOTAL_MAX = 256 * 1024;

/** Errors for `name` as a DNS-1123 subdomain (pod, PVC, NetworkPolicy, Role names). */
export function dnsSubdomainErrors(name: string, field: string): string[] {
  const errors: string[] = [];
  if (name.length > DNS1123_SUBDOMAIN_MAX) errors.push(`${field}: must be no more than ${DNS1123_SUBDOMAIN_MAX} characters`);
  if (!DNS1123_SUBDOMAIN_RE.test(name)) errors.push(`${field}: ${JSON.stringify(name)} is not a lowercase RFC 1123 subdomain`);
  return errors;
}

/** Errors for a label or annotation key: an optional DNS subdomain prefix and `/`, then a qualified name. */
export function qualifiedKeyErrors(key: string, field: string): string[] {
  const slash = key.lastIndexOf('/');
  const prefix = slash >= 0 ? key.slice(0, slash) : undefined;
  const name = slash >= 0 ? key.slice(slash + 1) : key;
  const errors: string[] = [];
  if (prefix !== undefined) errors.push(...dnsSubdomainErrors(prefix, `${field} prefix`));
  if (name.length === 0 || name.length > QUALIFIED_NAME_MAX || !QUALIFIED_NAME_RE.test(name)) {
    errors.push(`${field}: ${JSON.stringify(key)} is not a valid qualified name (alphanumerics, '-', '_' or '.', at most ${QUALIFIED_NAME_MAX}, starting and ending with an alphanumeric)`);
  }
  return errors;
}

export function labelValueErrors(value: string, field: string): string[] {
  if (value.length <= LABEL_VALUE_MAX && LABEL_VALUE_RE.test(value)) return [];
  return [`${field}: ${JSON.stringify(value)} is not a valid label value (at most ${LABEL_VALUE_MAX} of alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric)`];
}

function stringMap(v: unknown): Record<string, unknown> {
  return v !== null && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, unknown>) : {};
}

/** Errors in a `labels` map. */
export function labelErrors(labels: unknown, field: string): string[] {
  const errors: string[] = [];
  for (const [k, v] of Object.entries(stringMap(labels))) {
    errors.push(...qualifiedKeyErrors(k, `${field}[${k}]`));
    errors.push(...labelValueErrors(String(v), `${field}[${k}]`));
  }
  return errors;
}

/** Errors in an `annotations` map (keys as labels; values free, 256 KiB in total). */
export function annotationErrors(annotations: unknown, field: string): string[] {
  const errors: string[] = [];
  let total = 0;
  for (const [k, v] of Object.entries(stringMap(annotations))) {
    errors.push(...qualifiedKeyErrors(k, `${field}[${k}]`));
    total += k.length + String(v).length;
  }
  if (total > ANNOTATIONS_TOTAL_MAX) errors.push(`${field}: may not be more than ${ANNOTATIONS_TOTAL_MAX} bytes in total`);
  return errors;
}

/**
 * Errors in an object's `metadata` as the API server checks it on create: a DNS-1123 subdomain
 * name (or a generateName), valid labels and annotations. `path` prefixes each message.
 */
export function objectMetaErrors(meta: unknown, path = 'metadata'): string[] {
  const m = stringMap(meta);
  const errors: string[] = [];
  if (typeof m['name'] === 'string') errors.push(...dnsSubdomainErrors(m['name'], `${path}.name`));
  else if (typeof m['generateName'] !== 'string') errors.push(`${path}.name: Required value: name or generateName is required`);
  errors.push(...labelErrors(m['labels'], `${path}.labels`));
  errors.push(...annotationErrors(m['annotations'], `${path}.annotations`));
  return errors;
}
