import { describe, expect, it } from 'vitest';
import { Broker } from '../../src/broker/broker.js';
import { ConfigError } from '../../src/errors.js';
import type { BerthConfig } from '../../src/setup/berth-config.js';
import { tempDir } from '../helpers/temp-dir.js';

/* A config object written by hand in plain JavaScript (no parseConfig) is a clear config error, not a TypeError from deep inside. */

describe('Broker.open with a config that was not parsed', () => {
  it('is a ConfigError naming parseConfig as the fix', async () => {
    const plain = { backend: 'local', persistent: false } as unknown as BerthConfig;
    const opened = Broker.open({ config: plain, berthHome: tempDir('berth-plain-') });
    await expect(opened).rejects.toBeInstanceOf(ConfigError);
    await expect(opened).rejects.toThrow(/is a plain object, not a parsed config; pass parseConfig\(\{ \.\.\. \}\)/);
  });
});
