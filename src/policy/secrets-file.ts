import { readFileSync, statSync } from 'node:fs';
import { ConfigError } from '../errors.js';
import { secretsUserKey, SINGLE_TENANT, type SecretValues } from './env-grants.js';
import { formatUserRef, parseUserRef } from '../scope/user-ref.js';

/**
 * A `.env`-style secrets file (`env.secretsFile`), read once at start-up:
 *
 * ```
 * # global values: read exactly like berth's own environment (env.forward names, and
 * # per-user variables such as BERTH_USER_TELEGRAM_123456789_GITHUB_TOKEN)
 * OPENAI_API_KEY=sk-...
 * [telegram:123456789]
 * # values for this user of tenant `local` (the CLI's tenant) only, by their bare name
 * GITHUB_TOKEN=ghp_...
 * [acme/telegram:123456789]
 * # values for telegram:123456789 of tenant acme only: another tenant naming that id gets nothing
 * GITHUB_TOKEN=ghp_...
 * ```
 *
 * Lines: blank, `# comment`, `NAME=value` (an optional `export ` before it), or a section header
 * `[platform:id]` (tenant `local`) or `[tenant/platform:id]` naming a user as the call scope does.
 * Values are the rest of the line with
 * surrounding blanks trimmed (a `#` is part of the value), or quoted: `"..."` with `\n`, `\"`,
 * `\\` escapes, or `'...'` taken literally. A name twice in one section, or a section twice, is
 * an error. For one variable, berth's environment beats the file; a user's value beats any
 * global one. Errors give the file and line number and the rule broken, never any text of the
 * line: a misplaced line may well be part of a secret (a pasted PEM block).
 */
export interface SecretsFile extends SecretValues {
  path: string;
}

const NAME_RE = /^[A-Za-z_][A-Za-z0-9_]*$/;
const TENANT_RE = /^[A-Za-z0-9._-]{1,64}$/;
const SECTION_FORM = 'a section header is [platform:id] (a user of tenant local) or [tenant/platform:id], e.g. [acme/telegram:123456789]';
const USER_NAME_RE = /^[A-Za-z][A-Za-z0-9_]*$/;

function unquote(raw: string, fail: (why: string) => never): string {
  if (raw.startsWith("'")) {
    if (raw.length < 2 || !raw.endsWith("'") || raw.slice(1, -1).includes("'")) fail("a single-quoted value must end with ' and contain no other '");
    return raw.slice(1, -1);
  }
  if (raw.startsWith('"')) {
    let out = '';
    for (let i = 1; i < raw.length; i++) {
      const ch = raw[i]!;
      if (ch === '"') {
        if (i !== raw.length - 1) fail('text after the closing quote');
        return out;
      }
      if (ch === '\\') {
        const next = raw[++i];
        if (next === 'n') out += '\n';
        else if (next === '"' || next === '\\') out += next;
        else fail('unknown escape in a double-quoted value (use \\n, \\" or \\\\)');
      } else {
        out += ch;
      }
    }
    fail('a double-quoted value must end with "');
  }
  return raw;
}

/**
 * Parses the text of a secrets file. Throws `ConfigError` naming the file and line.
 *
 * @example
 * parseSecretsFile('GH_TOKEN=abc\n[telegram:1]\nGITHUB_TOKEN="x y"\n', '/etc/berth/secrets.env')
 * // { global: Map { GH_TOKEN => 'abc' }, users: Map { 'telegram:1' => Map { GITHUB_TOKEN => 'x y' } } }
 */
export function parseSecretsFile(text: string, path: string): SecretsFile {
  const global = new Map<string, string>();
  const users = new Map<string, Map<string, string>>();
  const headerLine = new Map<string, number>();
  let current = global;
  let section: string | undefined;
  const lines = text.split(/\r?\n/);
  lines.forEach((rawLine, index) => {
    const lineNo = index + 1;
    const fail = (why: string): never => {
      throw new ConfigError(`secrets file ${path} line ${lineNo}: ${why}`);
    };
    const line = rawLine.trim();
    if (line === '' || line.startsWith('#')) return;
    if (line.startsWith('[')) {
      if (!line.endsWith(']')) fail(SECTION_FORM);
      const key = sectionKey(line.slice(1, -1));
      if (key === undefined) fail(`the section header does not name a user; ${SECTION_FORM}`);
      const first = headerLine.get(key!);
      if (first !== undefined) fail(`this section names the same user as the one at line ${first}; keep one section per user`);
      headerLine.set(key!, lineNo);
      current = new Map();
      users.set(key!, current);
      section = key;
      return;
    }
    const body = line.startsWith('export ') ? line.slice('export '.length).trimStart() : line;
    const eq = body.indexOf('=');
    if (eq <= 0) fail('expected NAME=value, a [platform:id] header or a # comment');
    const name = body.slice(0, eq).trim();
    const nameRe = section === undefined ? NAME_RE : USER_NAME_RE;
    if (!nameRe.test(name)) {
      fail(`the text before "=" is not a variable name; use letters, digits and "_"${section === undefined ? ', not starting with a digit' : ', starting with a letter'}`);
    }
    if (current.has(name)) fail(`this variable is set twice${section === undefined ? ' before the first section' : ' in this section'}; keep one`);
    current.set(name, unquote(body.slice(eq + 1).trim(), fail));
  });
  return { path, global, users };
}

/** `tenant/platform:id` (or `platform:id` for tenant local) as a users-map key; undefined when malformed. */
function sectionKey(ref: string): string | undefined {
  const colon = ref.indexOf(':');
  const slash = ref.indexOf('/');
  // A slash before the platform's colon separates the tenant; platforms never contain one.
  const hasTenant = slash >= 0 && (colon < 0 || slash < colon);
  const tenant = hasTenant ? ref.slice(0, slash) : SINGLE_TENANT;
  if (!TENANT_RE.test(tenant)) return undefined;
  try {
    return secretsUserKey(tenant, formatUserRef(parseUserRef(hasTenant ? ref.slice(slash + 1) : ref)));
  } catch {
    return undefined;
  }
}

/**
 * Reads and parses a secrets file. Refuses one that others may read or write (like ssh does with
 * keys): its values are credentials.
 */
export function readSecretsFile(path: string): SecretsFile {
  let text: string;
  try {
    const st = statSync(path);
    if (!st.isFile()) throw new ConfigError(`secrets file ${path} (env.secretsFile) is not a regular file`);
    if (process.platform !== 'win32' && (st.mode & 0o077) !== 0) {
      throw new ConfigError(`secrets file ${path} (env.secretsFile) is accessible by group or others (mode ${(st.mode & 0o777).toString(8)}); run chmod 600 ${path}`);
    }
    text = readFileSync(path, 'utf8');
  } catch (err) {
    if (err instanceof ConfigError) throw err;
    const code = (err as NodeJS.ErrnoException).code;
    throw new ConfigError(`cannot read secrets file ${path} (env.secretsFile): ${code === 'ENOENT' ? 'it does not exist' : code ?? String(err)}`, { cause: err });
  }
  return parseSecretsFile(text, path);
}

/** Reads every secrets file the config names (top level and profiles), once each. */
export function readSecretsFiles(config: { base: { env: { secretsFile?: string | undefined } }; profiles: Readonly<Record<string, { env: { secretsFile?: string | undefined } }>> }): Map<string, SecretsFile> {
  const out = new Map<string, SecretsFile>();
  for (const s of [config.base, ...Object.values(config.profiles)]) {
    const path = s.env.secretsFile;
    if (path !== undefined && !out.has(path)) out.set(path, readSecretsFile(path));
  }
  return out;
}
