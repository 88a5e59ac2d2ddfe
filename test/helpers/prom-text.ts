/*
 * A small, strict parser of the Prometheus text exposition format (0.0.4), for tests that scrape
 * /metrics: every sample belongs to a family declared by `# TYPE` before it, names and label
 * names are valid, label values are properly quoted and escaped, values are numbers, no series
 * appears twice. Anything else throws, naming the line.
 */

export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

export interface Family {
  name: string;
  type: 'counter' | 'gauge' | 'histogram' | 'summary' | 'untyped';
  help: string | undefined;
  samples: Sample[];
}

const NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL_NAME = /^[a-zA-Z_][a-zA-Z0-9_]*$/;
const TYPES = new Set(['counter', 'gauge', 'histogram', 'summary', 'untyped']);

function familyOf(sample: string, families: Map<string, Family>): Family | undefined {
  const direct = families.get(sample);
  if (direct !== undefined) return direct;
  for (const suffix of ['_bucket', '_sum', '_count']) {
    if (!sample.endsWith(suffix)) continue;
    const f = families.get(sample.slice(0, -suffix.length));
    if (f !== undefined && (f.type === 'histogram' || (f.type === 'summary' && suffix !== '_bucket'))) return f;
  }
  return undefined;
}

function parseValue(text: string, line: number): number {
  if (text === '+Inf') return Infinity;
  if (text === '-Inf') return -Infinity;
  // Prometheus reads values with Go's ParseFloat, which takes NaN in any case (prom-client writes "Nan").
  if (/^nan$/i.test(text)) return NaN;
  if (!/^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$/.test(text)) throw new Error(`line ${line}: "${text}" is not a sample value`);
  return Number(text);
}

/** Parses `name{a="x",b="y"}` from the start of `rest`; returns the labels and what follows. */
function parseLabels(rest: string, line: number): { labels: Record<string, string>; after: string } {
  const labels: Record<string, string> = {};
  let i = 1;
  for (;;) {
    if (rest[i] === '}') return { labels, after: rest.slice(i + 1) };
    const eq = rest.indexOf('=', i);
    if (eq < 0) throw new Error(`line ${line}: unterminated label set`);
    const key = rest.slice(i, eq);
    if (!LABEL_NAME.test(key)) throw new Error(`line ${line}: bad label name "${key}"`);
    if (key in labels) throw new Error(`line ${line}: label "${key}" twice`);
    if (rest[eq + 1] !== '"') throw new Error(`line ${line}: label "${key}" value is not quoted`);
    let value = '';
    let j = eq + 2;
    for (; j < rest.length && rest[j] !== '"'; j++) {
      if (rest[j] === '\\') {
        const next = rest[++j];
        if (next === 'n') value += '\n';
        else if (next === '\\' || next === '"') value += next;
        else throw new Error(`line ${line}: bad escape "\\${next ?? ''}" in label "${key}"`);
      } else {
        value += rest[j];
      }
    }
    if (j >= rest.length) throw new Error(`line ${line}: unterminated value of label "${key}"`);
    labels[key] = value;
    i = j + 1;
    if (rest[i] === ',') i++;
    else if (rest[i] !== '}') throw new Error(`line ${line}: expected "," or "}" after label "${key}"`);
  }
}

/** Parses a whole exposition; throws on the first line that breaks the format. */
export function parsePrometheusText(body: string): Map<string, Family> {
  const families = new Map<string, Family>();
  const seen = new Set<string>();
  const lines = body.split('\n');
  if (lines[lines.length - 1] !== '') throw new Error('the exposition does not end with a newline');
  lines.forEach((text, index) => {
    const line = index + 1;
    if (text === '') return;
    if (text.startsWith('#')) {
      const m = /^# (HELP|TYPE) (\S+) ?(.*)$/.exec(text);
      if (m === null) return; // a plain comment
      const [, kind, name, rest] = m as unknown as [string, string, string, string];
      if (!NAME.test(name)) throw new Error(`line ${line}: bad metric name "${name}"`);
      const f = families.get(name);
      if (kind === 'TYPE') {
        if (!TYPES.has(rest)) throw new Error(`line ${line}: unknown type "${rest}"`);
        if (f !== undefined && f.samples.length > 0) throw new Error(`line ${line}: TYPE of ${name} after its samples`);
        if (f !== undefined && f.type !== 'untyped') throw new Error(`line ${line}: TYPE of ${name} twice`);
        families.set(name, { name, type: rest as Family['type'], help: f?.help, samples: f?.samples ?? [] });
      } else {
        families.set(name, { name, type: f?.type ?? 'untyped', help: rest, samples: f?.samples ?? [] });
      }
      return;
    }
    const nameEnd = text.search(/[{ ]/);
    if (nameEnd <= 0) throw new Error(`line ${line}: no sample name`);
    const name = text.slice(0, nameEnd);
    if (!NAME.test(name)) throw new Error(`line ${line}: bad metric name "${name}"`);
    let rest = text.slice(nameEnd);
    let labels: Record<string, string> = {};
    if (rest.startsWith('{')) ({ labels, after: rest } = parseLabels(rest, line));
    const parts = rest.trim().split(/\s+/);
    if (!rest.startsWith(' ') || parts.length < 1 || parts.length > 2) throw new Error(`line ${line}: expected " value [timestamp]"`);
    const value = parseValue(parts[0] as string, line);
    const family = familyOf(name, families);
    if (family === undefined) throw new Error(`line ${line}: sample ${name} has no # TYPE before it`);
    const series = `${name}${JSON.stringify(Object.entries(labels).sort())}`;
    if (seen.has(series)) throw new Error(`line ${line}: series ${series} twice`);
    seen.add(series);
    family.samples.push({ name, labels, value });
  });
  return families;
}

/** The value of the one sample named `name` whose labels include `labels`; undefined when none, an error when several. */
export function sampleValue(families: Map<string, Family>, name: string, labels: Record<string, string> = {}): number | undefined {
  const found = [...families.values()].flatMap((f) => f.samples)
    .filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v));
  if (found.length > 1) throw new Error(`${found.length} samples of ${name} match ${JSON.stringify(labels)}`);
  return found[0]?.value;
}
