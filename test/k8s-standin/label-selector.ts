/*
 * Label selectors in the API's string form (`a=b,c!=d,e in (f,g),h notin (i),j,!k`), as
 * apimachinery's `labels.Parse` reads them, for list calls.
 */

type Requirement = (labels: Readonly<Record<string, string>>) => boolean;

/** Splits on commas that are not inside parentheses. */
function terms(selector: string): string[] {
  const out: string[] = [];
  let depth = 0;
  let cur = '';
  for (const ch of selector) {
    if (ch === '(') depth++;
    if (ch === ')') depth--;
    if (ch === ',' && depth === 0) {
      out.push(cur);
      cur = '';
    } else {
      cur += ch;
    }
  }
  out.push(cur);
  return out.map((t) => t.trim()).filter((t) => t !== '');
}

function parseTerm(term: string): Requirement {
  let m = /^(\S+?)\s+(in|notin)\s+\(([^)]*)\)$/.exec(term);
  if (m !== null) {
    const [, key, op, list] = m as unknown as [string, string, string, string];
    const values = new Set(list.split(',').map((v) => v.trim()));
    return op === 'in' ? (l) => Object.hasOwn(l, key) && values.has(l[key]!) : (l) => !Object.hasOwn(l, key) || !values.has(l[key]!);
  }
  m = /^([^=!\s]+)\s*(==|=|!=)\s*(\S*)$/.exec(term);
  if (m !== null) {
    const [, key, op, value] = m as unknown as [string, string, string, string];
    return op === '!=' ? (l) => l[key] !== value : (l) => Object.hasOwn(l, key) && l[key] === value;
  }
  m = /^!\s*(\S+)$/.exec(term);
  if (m !== null) {
    const key = m[1] as string;
    return (l) => !Object.hasOwn(l, key);
  }
  if (/^\S+$/.test(term)) return (l) => Object.hasOwn(l, term);
  throw new SyntaxError(`unable to parse requirement: ${JSON.stringify(term)}`);
}

/** A predicate over a label map; the empty selector matches everything. Throws SyntaxError on a malformed one. */
export function parseLabelSelector(selector: string | null | undefined): Requirement {
  const reqs = terms(selector ?? '').map(parseTerm);
  return (labels) => reqs.every((r) => r(labels));
}
