import type * as z from 'zod';

/*
 * Zod issues turned into one-line messages that name the key, what was expected and what was
 * written (never an `env.static` value), with "did you mean" hints from the known keys.
 */

/** Known keys per location (`top`, `profile`, and each section by name), for "did you mean" hints. */
export type KnownKeys = Readonly<Record<string, readonly string[]>>;

type Path = readonly PropertyKey[];

/** `profiles.bot.env.forward[0]` */
function keyPath(path: Path): string {
  let out = '';
  for (const seg of path) {
    if (typeof seg === 'number') out += `[${seg}]`;
    else out += out === '' ? String(seg) : `.${String(seg)}`;
  }
  return out;
}

export function within(source: string | undefined): string {
  return source === undefined ? '' : ` (in ${source})`;
}

function isInEnvStatic(path: Path): boolean {
  const rel = path[0] === 'profiles' ? path.slice(2) : path;
  return rel[0] === 'env' && rel[1] === 'static';
}

/** What the user wrote, for an error message. Never echoes an `env.static` value. */
function describeInput(input: unknown, redact: boolean): string {
  if (input === null) return 'an empty value';
  if (Array.isArray(input)) return 'a list';
  if (typeof input === 'object') return 'a mapping';
  if (redact) return `a ${typeof input}`;
  if (typeof input === 'string') {
    return JSON.stringify(input.length > 60 ? `${input.slice(0, 57)}...` : input);
  }
  return String(input);
}

function editDistance(a: string, b: string): number {
  let prev = Array.from({ length: b.length + 1 }, (_, i) => i);
  for (let i = 1; i <= a.length; i++) {
    const cur = [i];
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      cur[j] = Math.min(prev[j]! + 1, cur[j - 1]! + 1, prev[j - 1]! + cost);
    }
    prev = cur;
  }
  return prev[b.length]!;
}

function suggest(key: string, known: readonly string[]): string | undefined {
  const lower = key.toLowerCase();
  const exact = known.find((k) => k.toLowerCase() === lower);
  if (exact !== undefined) return exact;
  let best: string | undefined;
  let bestDistance = Math.max(1, Math.min(3, Math.floor(key.length / 3)));
  for (const k of known) {
    const d = editDistance(lower, k.toLowerCase());
    if (d <= bestDistance) {
      best = k;
      bestDistance = d - 1;
    }
  }
  return best;
}

function unknownKeyMessage(objectPath: Path, key: string, source: string | undefined, known: KnownKeys): string {
  const inProfile = objectPath[0] === 'profiles' && objectPath.length >= 2;
  const rel = inProfile ? objectPath.slice(2) : objectPath;
  const location = rel.length === 0 ? (inProfile ? 'profile' : 'top') : String(rel[0]);
  const full = keyPath([...objectPath, key]);
  const where = source === undefined ? '' : ` in ${source}`;
  if (inProfile && rel.length === 0 && (known['top'] ?? []).includes(key)) {
    return `config key "${full}" is only allowed at the top level${where}; move it out of ${keyPath(objectPath)}`;
  }
  const hint = suggest(key, known[location] ?? []);
  return `unknown config key "${full}"${where}${hint === undefined ? '' : `; did you mean "${hint}"?`}`;
}

export function issueMessages(issue: z.core.$ZodIssue, source: string | undefined, known: KnownKeys): string[] {
  if (issue.code === 'unrecognized_keys') {
    return issue.keys.map((key) => unknownKeyMessage(issue.path, key, source, known));
  }
  const at = issue.path.length === 0 ? 'config' : `config key "${keyPath(issue.path)}"`;
  if (issue.code === 'custom' && issue.params?.['full'] === true) {
    return [`${at}: ${issue.message}${within(source)}`];
  }
  const got = describeInput(issue.input, isInEnvStatic(issue.path));
  return [`${at}: expected ${issue.message}, got ${got}${within(source)}`];
}

/** `__proto__` would silently vanish in a record (zod drops it); refuse it loudly instead. */
export function protoKeyProblems(value: unknown, path: PropertyKey[], source: string | undefined): string[] {
  if (value === null || typeof value !== 'object') return [];
  const problems: string[] = [];
  for (const key of Object.keys(value)) {
    const here = [...path, key];
    if (key === '__proto__') {
      problems.push(`config key "${keyPath(here)}" is not allowed${within(source)}`);
    } else {
      problems.push(...protoKeyProblems((value as Record<string, unknown>)[key], here, source));
    }
  }
  return problems;
}
