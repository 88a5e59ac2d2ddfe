import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/setup/parse-config.js';
import { ConfigError } from '../../src/errors.js';
import { assertAllowedRootsExist, outsideAllowedRootsReason } from '../../src/policy/allowed-roots.js';
import { hostMountFs } from '../../src/policy/mount.js';
import { tempDir } from '../helpers/temp-dir.js';

describe('workspace.allowedRoots', () => {
  it('no roots: everything passes this rule (the other rules still apply)', () => {
    expect(outsideAllowedRootsReason('/anything', [], hostMountFs)).toBeUndefined();
  });

  it('a missing root is a start-up config error naming the key, the entry and the fix', () => {
    const dir = tempDir('berth-roots-');
    const missing = join(dir, 'missing');
    const call = () => assertAllowedRootsExist(parseConfig({ backend: 'docker', workspace: { allowedRoots: [dir, missing] } }));
    expect(call).toThrow(ConfigError);
    expect(call).toThrow(`workspace.allowedRoots entry ${missing} does not exist; create it or remove the entry`);
  });

  it('a root that is a file is a config error; a profile reports only what it wrote itself', () => {
    const dir = tempDir('berth-roots-');
    const file = join(dir, 'f');
    writeFileSync(file, '');
    mkdirSync(join(dir, 'ok'));
    expect(() => assertAllowedRootsExist(parseConfig({ backend: 'docker', workspace: { allowedRoots: [file] } }))).toThrow(/is not a directory/);
    const call = () => assertAllowedRootsExist(parseConfig({
      backend: 'docker', workspace: { allowedRoots: [join(dir, 'ok')] },
      profiles: { bot: { workspace: { allowedRoots: [join(dir, 'nope')] } }, other: {} },
    }));
    expect(call).toThrow(`profiles.bot.workspace.allowedRoots entry ${join(dir, 'nope')} does not exist; create it or remove the entry`);
    expect(() => assertAllowedRootsExist(parseConfig({ backend: 'docker', workspace: { allowedRoots: [join(dir, 'ok')] }, profiles: { other: {} } }))).not.toThrow();
  });
});
