import { describe, expect, it } from 'vitest';
import { ConfigError } from '../../src/errors.js';
import { parseConfig } from '../../src/setup/parse-config.js';

/** The snapshot keys of `limits:`: their defaults, and one refusal per rule (checked at start-up, naming the key). */
describe('limits.snapshots, snapshotBytes and snapshotRetentionDays', () => {
  it('defaults: 100 snapshots, bytes bounded by the host, 30 days', () => {
    expect(parseConfig({}).limits).toMatchObject({ snapshots: 100, snapshotBytes: undefined, snapshotRetentionDays: 30 });
  });

  it('takes what is written; 0 snapshots turns them off', () => {
    expect(parseConfig({ limits: { snapshots: 0, snapshotBytes: 1 << 30, snapshotRetentionDays: 7 } }).limits)
      .toMatchObject({ snapshots: 0, snapshotBytes: 1 << 30, snapshotRetentionDays: 7 });
  });

  const refused: [string, Record<string, unknown>, RegExp][] = [
    ['a negative count', { snapshots: -1 }, /limits\.snapshots/],
    ['bytes under 1 KiB', { snapshotBytes: 10 }, /limits\.snapshotBytes/],
    ['a retention of 0 days', { snapshotRetentionDays: 0 }, /limits\.snapshotRetentionDays/],
    ['an unknown key', { snapshotCount: 3 }, /snapshotCount/],
  ];
  it.each(refused)('refuses %s', (_, limits, message) => {
    expect(() => parseConfig({ limits })).toThrow(ConfigError);
    expect(() => parseConfig({ limits })).toThrow(message);
  });

  it('is top level only: a profile cannot set it', () => {
    expect(() => parseConfig({ profiles: { p: { limits: { snapshots: 3 } } } })).toThrow(ConfigError);
  });
});
