/*
 * Field selectors in the API's string form (`metadata.name=x,status.phase!=Failed`), for list and
 * watch calls. Like a real API server, only the fields a resource indexes are accepted: every
 * resource knows `metadata.name` and `metadata.namespace` (custom resources only those), pods
 * also `spec.nodeName` and `status.phase`; any other field is refused with 400.
 */

type Obj = Record<string, unknown> & { metadata: Record<string, unknown> };

const COMMON = ['metadata.name', 'metadata.namespace'];
const EXTRA: Readonly<Record<string, readonly string[]>> = { pods: ['spec.nodeName', 'status.phase'] };

function valueAt(obj: Obj, path: string): string {
  let cur: unknown = obj;
  for (const part of path.split('.')) cur = (cur as Record<string, unknown> | undefined)?.[part];
  return cur === undefined || cur === null ? '' : String(cur);
}

/** A predicate over objects of `plural`; the empty selector matches everything. Throws SyntaxError naming a field the resource does not index. */
export function parseFieldSelector(plural: string, selector: string | null | undefined): (obj: Obj) => boolean {
  const known = [...COMMON, ...(EXTRA[plural] ?? [])];
  const reqs = (selector ?? '').split(',').map((t) => t.trim()).filter((t) => t !== '').map((term) => {
    const m = /^([^=!]+?)\s*(==|=|!=)\s*(.*)$/.exec(term);
    if (m === null) throw new SyntaxError(`invalid selector: '${term}'; can't understand '${term}'`);
    const [, field, op, value] = m as unknown as [string, string, string, string];
    if (!known.includes(field)) throw new SyntaxError(`field label not supported: ${field}`);
    return (o: Obj): boolean => (valueAt(o, field) === value) === (op !== '!=');
  });
  return (obj) => reqs.every((r) => r(obj));
}
