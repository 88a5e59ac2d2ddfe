import { existsSync, mkdirSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { makeRestoreStage } from '../../src/backends/bwrap/snapshots.js';
import { tempDir } from '../helpers/temp-dir.js';

afterEach(() => vi.restoreAllMocks());

describe('a bwrap restore\'s staging dir', () => {
  it('gets a fresh random name: restores in the same millisecond never share one, and none removes another\'s', async () => {
    const root = tempDir('berth-stage-');
    vi.spyOn(Date, 'now').mockReturnValue(1_700_000_000_000);
    // What a restore begun in the same millisecond staged under a clock-made name.
    const other = join(root, `.restore-${(1_700_000_000_000).toString(36)}`);
    mkdirSync(other);
    writeFileSync(join(other, 'home'), 'theirs');

    const [a, b] = await Promise.all([makeRestoreStage(root), makeRestoreStage(root)]);
    expect(a).not.toBe(b);
    expect(a).not.toBe(other);
    expect(b).not.toBe(other);
    for (const d of [a, b]) expect(statSync(d).mode & 0o777).toBe(0o700);
    expect(existsSync(join(other, 'home'))).toBe(true);
  });
});
