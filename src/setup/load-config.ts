import { readFileSync, statSync } from 'node:fs';
import { homedir } from 'node:os';
import { join, resolve } from 'node:path';
import { parseDocument } from 'yaml';
import { ConfigError } from '../errors.js';
import type { BerthConfig } from './berth-config.js';
import { parseConfig } from './parse-config.js';

/** Only `missing` means defaults; a file that exists but is bad is never skipped. */
export type ConfigLoadResult =
  | { kind: 'ok'; config: BerthConfig; path: string }
  | { kind: 'missing'; searched: string[] }
  | { kind: 'invalid'; path: string; error: ConfigError }
  | { kind: 'unreadable'; path: string; error: ConfigError };

export interface FindConfigOptions {
  /** `--config FILE`; relative to `cwd`. It must exist. */
  configFlag?: string | undefined;
  cwd: string;
  berthHome: string;
}

/** `$BERTH_HOME`, else `~/.berth`. Pass the environment explicitly (read once at start-up). */
export function defaultBerthHome(env: NodeJS.ProcessEnv): string {
  if (env['BERTH_HOME']) return resolve(env['BERTH_HOME']);
  const home = env['HOME'] || env['USERPROFILE'] || homedir();
  return join(home, '.berth');
}

function describeFsError(err: unknown): string {
  const code = (err as NodeJS.ErrnoException | undefined)?.code;
  switch (code) {
    case 'ENOENT':
      return 'it does not exist';
    case 'EISDIR':
      return 'it is a directory, not a file';
    case 'EACCES':
    case 'EPERM':
      return 'permission denied';
    default:
      return code ?? (err instanceof Error ? err.message : String(err));
  }
}

function yamlErrorMessage(path: string, errors: readonly { message: string; linePos?: unknown }[]): string {
  const first = errors[0]!;
  // The yaml package appends " at line L, column C:" and a source excerpt; keep the first line.
  const text = first.message.split('\n')[0]!.replace(/ at line \d+, column \d+:?$/, '');
  const pos = (first.linePos as { line: number; col: number }[] | undefined)?.[0];
  const where = pos === undefined ? '' : ` at line ${pos.line}, column ${pos.col}`;
  const more = errors.length > 1 ? ` (and ${errors.length - 1} more)` : '';
  return `YAML syntax error in ${path}${where}: ${text}${more}`;
}

/**
 * Reads and validates one config file. Never throws for a bad file: the result says why.
 *
 * @example
 * const result = readConfigFile('/srv/bot/berth.yaml');
 * if (result.kind === 'ok') startBroker(result.config);
 */
export function readConfigFile(path: string): ConfigLoadResult {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    const error = new ConfigError(`cannot read config file ${path}: ${describeFsError(err)}`, { cause: err });
    return { kind: 'unreadable', path, error };
  }
  const doc = parseDocument(text, { prettyErrors: true, uniqueKeys: true });
  if (doc.errors.length > 0) {
    return { kind: 'invalid', path, error: new ConfigError(yamlErrorMessage(path, doc.errors)) };
  }
  try {
    // toJS throws on alias bombs (maxAliasCount), which is a bad file, not a bug.
    const raw: unknown = doc.toJS();
    return { kind: 'ok', config: parseConfig(raw, path), path };
  } catch (err) {
    if (err instanceof ConfigError) return { kind: 'invalid', path, error: err };
    const message = err instanceof Error ? err.message : String(err);
    return { kind: 'invalid', path, error: new ConfigError(`invalid YAML in ${path}: ${message}`, { cause: err }) };
  }
}

/** Anything but "not there" counts as present, so an unreadable file is reported, not skipped. */
function isPresent(path: string): boolean {
  try {
    statSync(path);
    return true;
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    return code !== 'ENOENT' && code !== 'ENOTDIR';
  }
}

/**
 * Finds the config: `--config FILE` (which must exist), else `./berth.yaml`, else
 * `$BERTH_HOME/config.yaml`, else `missing`. The first file found is the only one read.
 *
 * @example
 * findConfig({ cwd: process.cwd(), berthHome: defaultBerthHome(process.env) });
 */
export function findConfig(opts: FindConfigOptions): ConfigLoadResult {
  if (opts.configFlag !== undefined) {
    const path = resolve(opts.cwd, opts.configFlag);
    if (opts.configFlag === '' || !isPresent(path)) {
      const error = new ConfigError(
        `config file ${opts.configFlag === '' ? '""' : path} given with --config does not exist; check the path, or drop --config to use ./berth.yaml or $BERTH_HOME/config.yaml`,
      );
      return { kind: 'unreadable', path, error };
    }
    return readConfigFile(path);
  }
  const searched = [resolve(opts.cwd, 'berth.yaml'), resolve(opts.cwd, opts.berthHome, 'config.yaml')];
  for (const path of searched) {
    if (isPresent(path)) return readConfigFile(path);
  }
  return { kind: 'missing', searched };
}

/**
 * Finds and validates the config; no file means built-in defaults. Throws `ConfigError` for a
 * file that is invalid or cannot be read.
 *
 * @example
 * const config = loadConfig({ cwd: process.cwd(), berthHome: defaultBerthHome(process.env) });
 */
export function loadConfig(opts: FindConfigOptions): BerthConfig {
  const result = findConfig(opts);
  switch (result.kind) {
    case 'ok':
      return result.config;
    case 'missing':
      return parseConfig({});
    case 'invalid':
    case 'unreadable':
      throw result.error;
  }
}
