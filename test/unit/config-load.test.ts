import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ConfigError } from '../../src/errors.js';
import { defaultBerthHome, findConfig, loadConfig, readConfigFile } from '../../src/setup/load-config.js';
import { parseConfig } from '../../src/setup/parse-config.js';

let root: string;
let cwd: string;
let berthHome: string;

beforeEach(() => {
  root = mkdtempSync(join(tmpdir(), 'berth-config-'));
  cwd = join(root, 'project');
  berthHome = join(root, 'home');
  mkdirSync(cwd);
  mkdirSync(berthHome);
});

afterEach(() => {
  rmSync(root, { recursive: true, force: true });
});

function write(path: string, text: string): string {
  writeFileSync(path, text);
  return path;
}

describe('readConfigFile', () => {
  it('reads a valid file', () => {
    const path = write(join(cwd, 'berth.yaml'), 'backend: local\nexec:\n  timeoutSeconds: 30\n');
    const result = readConfigFile(path);
    expect(result.kind).toBe('ok');
    if (result.kind !== 'ok') return;
    expect(result.path).toBe(path);
    expect(result.config.base.backend).toBe('local');
    expect(result.config.base.exec.timeoutSeconds).toBe(30);
    expect(result.config.source).toBe(path);
  });

  it('treats an empty file as defaults', () => {
    const result = readConfigFile(write(join(cwd, 'berth.yaml'), ''));
    expect(result.kind).toBe('ok');
    if (result.kind === 'ok') expect(result.config.base).toEqual(parseConfig({}).base);
  });

  it('treats a comments-only file as defaults', () => {
    const result = readConfigFile(write(join(cwd, 'berth.yaml'), '# nothing yet\n'));
    expect(result.kind).toBe('ok');
  });

  it('reports a YAML syntax error with line and column', () => {
    const path = write(join(cwd, 'berth.yaml'), 'backend: local\nexec:\n  timeoutSeconds: [1, 2\n');
    const result = readConfigFile(path);
    expect(result.kind).toBe('invalid');
    if (result.kind !== 'invalid') return;
    expect(result.error).toBeInstanceOf(ConfigError);
    expect(result.error.message).toMatch(new RegExp(`^YAML syntax error in ${path} at line \\d+, column \\d+: `));
    expect(result.error.message).not.toContain('\n');
  });

  it('reports a duplicate key with its line', () => {
    const path = write(join(cwd, 'berth.yaml'), 'backend: local\nbackend: docker\n');
    const result = readConfigFile(path);
    expect(result.kind).toBe('invalid');
    if (result.kind === 'invalid') expect(result.error.message).toContain(`YAML syntax error in ${path} at line 2, column 1: Map keys must be unique`);
  });

  it('reports schema errors with the file path', () => {
    const path = write(join(cwd, 'berth.yaml'), 'profiles:\n  bot:\n    sharedkey: team\n');
    const result = readConfigFile(path);
    expect(result.kind).toBe('invalid');
    if (result.kind === 'invalid') {
      expect(result.error.message).toBe(`unknown config key "profiles.bot.sharedkey" in ${path}; did you mean "sharedKey"?`);
    }
  });

  it('reports a top-level list as invalid', () => {
    const result = readConfigFile(write(join(cwd, 'berth.yaml'), '- backend\n'));
    expect(result.kind).toBe('invalid');
    if (result.kind === 'invalid') expect(result.error.message).toContain('expected a mapping of config keys, got a list');
  });

  it('reports a directory as unreadable', () => {
    const result = readConfigFile(cwd);
    expect(result.kind).toBe('unreadable');
    if (result.kind === 'unreadable') {
      expect(result.error).toBeInstanceOf(ConfigError);
      expect(result.error.message).toBe(`cannot read config file ${cwd}: it is a directory, not a file`);
    }
  });

  it('reports a missing file as unreadable', () => {
    const result = readConfigFile(join(cwd, 'nope.yaml'));
    expect(result.kind).toBe('unreadable');
    if (result.kind === 'unreadable') expect(result.error.message).toContain('it does not exist');
  });

  it('refuses an alias bomb instead of expanding it', () => {
    const lines = ['a: &a [x, x, x, x, x, x, x, x, x, x]'];
    for (let i = 0; i < 8; i++) {
      const prev = String.fromCharCode(97 + i);
      const next = String.fromCharCode(98 + i);
      lines.push(`${next}: &${next} [*${prev}, *${prev}, *${prev}, *${prev}, *${prev}, *${prev}, *${prev}, *${prev}, *${prev}, *${prev}]`);
    }
    const path = write(join(cwd, 'berth.yaml'), `${lines.join('\n')}\n`);
    const result = readConfigFile(path);
    expect(result.kind).toBe('invalid');
    if (result.kind === 'invalid') expect(result.error.message).toContain(`invalid YAML in ${path}: Excessive alias count`);
  });
});

describe('findConfig', () => {
  it('prefers --config over ./berth.yaml and $BERTH_HOME/config.yaml', () => {
    write(join(cwd, 'berth.yaml'), 'backend: ssh\n');
    write(join(berthHome, 'config.yaml'), 'backend: docker\n');
    const flag = write(join(root, 'custom.yaml'), 'backend: local\n');
    const result = findConfig({ configFlag: flag, cwd, berthHome });
    expect(result).toMatchObject({ kind: 'ok', path: flag });
  });

  it('resolves a relative --config against cwd', () => {
    write(join(cwd, 'my.yaml'), 'backend: local\n');
    expect(findConfig({ configFlag: 'my.yaml', cwd, berthHome })).toMatchObject({ kind: 'ok', path: join(cwd, 'my.yaml') });
  });

  it('reports a missing --config file as unreadable, never as defaults', () => {
    write(join(cwd, 'berth.yaml'), 'backend: local\n');
    const result = findConfig({ configFlag: 'gone.yaml', cwd, berthHome });
    expect(result.kind).toBe('unreadable');
    if (result.kind === 'unreadable') {
      expect(result.path).toBe(join(cwd, 'gone.yaml'));
      expect(result.error.message).toContain(`config file ${join(cwd, 'gone.yaml')} given with --config does not exist`);
    }
  });

  it('reports an empty --config as unreadable', () => {
    expect(findConfig({ configFlag: '', cwd, berthHome }).kind).toBe('unreadable');
  });

  it('reports a directory given with --config as unreadable', () => {
    const result = findConfig({ configFlag: berthHome, cwd, berthHome });
    expect(result.kind).toBe('unreadable');
    if (result.kind === 'unreadable') expect(result.error.message).toContain('it is a directory');
  });

  it('prefers ./berth.yaml over $BERTH_HOME/config.yaml', () => {
    write(join(cwd, 'berth.yaml'), 'backend: ssh\nssh: { host: build1, identityFile: /keys/berth }\n');
    write(join(berthHome, 'config.yaml'), 'backend: local\n');
    expect(findConfig({ cwd, berthHome })).toMatchObject({ kind: 'ok', path: join(cwd, 'berth.yaml') });
  });

  it('falls back to $BERTH_HOME/config.yaml', () => {
    write(join(berthHome, 'config.yaml'), 'backend: local\n');
    const result = findConfig({ cwd, berthHome });
    expect(result).toMatchObject({ kind: 'ok', path: join(berthHome, 'config.yaml') });
  });

  it('does not skip an invalid ./berth.yaml in favour of $BERTH_HOME/config.yaml', () => {
    write(join(cwd, 'berth.yaml'), 'bakend: local\n');
    write(join(berthHome, 'config.yaml'), 'backend: local\n');
    expect(findConfig({ cwd, berthHome })).toMatchObject({ kind: 'invalid', path: join(cwd, 'berth.yaml') });
  });

  it('does not skip an unreadable ./berth.yaml (a directory)', () => {
    mkdirSync(join(cwd, 'berth.yaml'));
    write(join(berthHome, 'config.yaml'), 'backend: local\n');
    expect(findConfig({ cwd, berthHome })).toMatchObject({ kind: 'unreadable', path: join(cwd, 'berth.yaml') });
  });

  it('reports missing with the searched paths', () => {
    expect(findConfig({ cwd, berthHome })).toEqual({
      kind: 'missing',
      searched: [join(cwd, 'berth.yaml'), join(berthHome, 'config.yaml')],
    });
  });
});

describe('loadConfig', () => {
  it('returns defaults when no file exists', () => {
    const config = loadConfig({ cwd, berthHome });
    expect(config).toEqual(parseConfig({}));
    expect(config.source).toBeUndefined();
    expect(Object.isFrozen(config.base)).toBe(true);
  });

  it('returns the found config', () => {
    write(join(cwd, 'berth.yaml'), 'backend: local\n');
    expect(loadConfig({ cwd, berthHome }).base.backend).toBe('local');
  });

  it('throws ConfigError for an invalid file', () => {
    write(join(cwd, 'berth.yaml'), 'backend: podman\n');
    expect(() => loadConfig({ cwd, berthHome })).toThrow(ConfigError);
    expect(() => loadConfig({ cwd, berthHome })).toThrow('config key "backend": expected one of');
  });

  it('throws ConfigError for a missing --config file', () => {
    expect(() => loadConfig({ configFlag: 'gone.yaml', cwd, berthHome })).toThrow(ConfigError);
  });
});

describe('defaultBerthHome', () => {
  it('uses $BERTH_HOME', () => {
    expect(defaultBerthHome({ BERTH_HOME: '/srv/berth', HOME: '/home/ana' })).toBe('/srv/berth');
  });

  it('falls back to ~/.berth', () => {
    expect(defaultBerthHome({ HOME: '/home/ana' })).toBe('/home/ana/.berth');
  });

  it('ignores an empty $BERTH_HOME', () => {
    expect(defaultBerthHome({ BERTH_HOME: '', HOME: '/home/ana' })).toBe('/home/ana/.berth');
  });
});
