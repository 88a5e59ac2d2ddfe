import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { formatEffectiveConfig } from '../../src/setup/format-config.js';
import { parseConfig } from '../../src/setup/parse-config.js';

describe('formatEffectiveConfig', () => {
  it('says when the built-in defaults are in effect', () => {
    const text = formatEffectiveConfig(parseConfig({}));
    expect(text.split('\n')[0]).toBe('# effective berth config: built-in defaults (no config file found)');
    const doc = parse(text) as Record<string, unknown>;
    expect(doc).toMatchObject({ multiProfile: false, backend: 'docker', scope: 'auto', persistent: false });
    expect(doc['profiles']).toBeUndefined();
    expect(doc).not.toHaveProperty('sharedKey');
  });

  it('names the source file', () => {
    expect(formatEffectiveConfig(parseConfig({}, '/p/berth.yaml'))).toMatch(/^# effective berth config from \/p\/berth\.yaml\n/);
  });

  it('shows every profile fully merged, in name order', () => {
    const config = parseConfig({
      persistent: true,
      sharedKey: 'team',
      env: { static: { MODE: 'prod' }, forward: ['GH_TOKEN'] },
      profiles: { zed: { scope: 'session', sharedKey: '' }, alpha: { exec: { timeoutSeconds: 5 } } },
    });
    const doc = parse(formatEffectiveConfig(config)) as {
      sharedKey: string;
      env: { static: Record<string, string>; forward: string[] };
      profiles: Record<string, Record<string, unknown>>;
    };
    expect(doc.sharedKey).toBe('team');
    expect(Object.keys(doc.profiles)).toEqual(['alpha', 'zed']);
    expect(doc.profiles['alpha']).toMatchObject({ sharedKey: 'team', exec: { timeoutSeconds: 5, maxOutputChars: 50_000 } });
    expect(doc.profiles['zed']).toMatchObject({ scope: 'session' });
    expect(doc.profiles['zed']).not.toHaveProperty('sharedKey');
    // env.static values are literals, not secrets; forwarded entries are names only.
    expect(doc.env).toMatchObject({ static: { MODE: 'prod' }, forward: ['GH_TOKEN'] });
  });

  it('never prints a value from the process environment', () => {
    const previous = process.env['BERTH_TEST_SECRET'];
    process.env['BERTH_TEST_SECRET'] = 'sk-very-secret-value';
    try {
      const text = formatEffectiveConfig(parseConfig({ env: { forward: ['BERTH_TEST_SECRET', 'BERTH_*'] } }));
      expect(text).toContain('BERTH_TEST_SECRET');
      expect(text).not.toContain('sk-very-secret-value');
    } finally {
      if (previous === undefined) delete process.env['BERTH_TEST_SECRET'];
      else process.env['BERTH_TEST_SECRET'] = previous;
    }
  });

  it('omits unset docker limits and shows set ones', () => {
    const doc = parse(formatEffectiveConfig(parseConfig({ docker: { memoryMb: 512 } }))) as { docker: Record<string, unknown> };
    expect(doc.docker).toMatchObject({ image: 'berth-sandbox:latest', memoryMb: 512 });
    expect(doc.docker).not.toHaveProperty('cpus');
  });

  it('leaves out the docker section for profiles that do not use docker', () => {
    const doc = parse(formatEffectiveConfig(parseConfig({ profiles: { bot: { backend: 'local' } } }))) as {
      docker?: unknown;
      profiles: Record<string, Record<string, unknown>>;
    };
    expect(doc.docker).toBeDefined();
    expect(doc.profiles['bot']).not.toHaveProperty('docker');
  });
});
