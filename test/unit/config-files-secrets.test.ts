import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { formatEffectiveConfig } from '../../src/setup/format-config.js';
import { parseConfig } from '../../src/setup/parse-config.js';
import { ConfigError } from '../../src/errors.js';

function problem(raw: unknown, source?: string): string {
  try {
    parseConfig(raw, source);
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigError);
    return (err as Error).message;
  }
  throw new Error('expected a ConfigError');
}

describe('config: files and env.secretsFile', () => {
  it('files.maxBytes defaults to 100 MiB and may be set per profile', () => {
    const c = parseConfig({ files: { maxBytes: 1000 }, profiles: { bot: { files: { maxBytes: 5 } }, other: {} } });
    expect(parseConfig({}).base.files).toEqual({ mediaMode: 'copy', maxBytes: 104_857_600 });
    expect(c.base.files.maxBytes).toBe(1000);
    expect(c.profiles['bot']!.files.maxBytes).toBe(5);
    expect(c.profiles['other']!.files.maxBytes).toBe(1000);
  });

  it('files.maxBytes must be a whole number between 1 and 2^31-1', () => {
    expect(problem({ files: { maxBytes: 0 } })).toBe('config key "files.maxBytes": expected an integer between 1 and 2147483647, got 0');
    expect(problem({ files: { maxBytes: 2 ** 31 } })).toMatch(/config key "files.maxBytes": expected an integer between 1 and 2147483647/);
    expect(problem({ files: { maxBytes: '1MB' } })).toMatch(/got "1MB"/);
  });

  it('an unknown key under files is an error with a suggestion', () => {
    expect(problem({ files: { maxbytes: 1 } })).toBe('unknown config key "files.maxbytes"; did you mean "maxBytes"?');
  });

  it('env.secretsFile: a relative path is relative to the config file', () => {
    expect(parseConfig({ env: { secretsFile: 'secrets.env' } }, '/srv/bot/berth.yaml').base.env.secretsFile).toBe('/srv/bot/secrets.env');
    expect(parseConfig({ env: { secretsFile: '/etc/berth/s.env' } }).base.env.secretsFile).toBe('/etc/berth/s.env');
    const c = parseConfig({ env: { secretsFile: '/a.env' }, profiles: { bot: { env: { secretsFile: 'b.env' } }, x: {} } }, '/srv/berth.yaml');
    expect(c.profiles['bot']!.env.secretsFile).toBe('/srv/b.env');
    expect(c.profiles['x']!.env.secretsFile).toBe('/a.env');
  });

  it('env.secretsFile: relative with no config file is an error; empty is an error', () => {
    expect(problem({ env: { secretsFile: 'secrets.env' } }))
      .toBe('config key "env.secretsFile": "secrets.env" is a relative path and this config comes from no file; use an absolute path');
    expect(problem({ env: { secretsFile: '' } })).toMatch(/config key "env.secretsFile": expected a path to a secrets file/);
  });

  it('berth config check prints files.maxBytes and the secrets file path (never its values)', () => {
    const doc = parse(formatEffectiveConfig(parseConfig({ env: { secretsFile: '/etc/berth/s.env' }, files: { maxBytes: 42 } }))) as Record<string, Record<string, unknown>>;
    expect(doc['files']).toEqual({ maxBytes: 42, mediaMode: 'copy' });
    expect(doc['env']!['secretsFile']).toBe('/etc/berth/s.env');
  });
});
