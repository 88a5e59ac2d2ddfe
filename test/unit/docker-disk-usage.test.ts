import { linkSync, mkdirSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { diskLimitError, duBytes, MIB } from '../../src/backends/docker/disk-usage.js';
import { tempDir } from '../helpers/temp-dir.js';
import { testSpec } from '../helpers/docker.js';

describe('measuring berth\'s own dirs of a sandbox', () => {
  it('counts allocated bytes once per file; planted links never lead the walk elsewhere', async () => {
    const root = tempDir('berth-du-');
    const outside = join(root, 'outside');
    mkdirSync(outside);
    writeFileSync(join(outside, 'big'), Buffer.alloc(4 * MIB, 1));
    const dir = join(root, 'sandbox');
    mkdirSync(dir);
    writeFileSync(join(dir, 'own'), Buffer.alloc(MIB, 1));
    const alone = await duBytes(dir);
    expect(alone).toBeGreaterThanOrEqual(MIB);
    expect(alone).toBeLessThan(MIB + 64 * 1024);
    // A symlink to a host dir, and a second name of the same file, add (almost) nothing.
    symlinkSync(outside, join(dir, 'link'));
    linkSync(join(dir, 'own'), join(dir, 'again'));
    expect(await duBytes(dir)).toBeLessThan(MIB + 64 * 1024);
    expect(await duBytes(join(root, 'missing'))).toBe(0);
  });

  it('the error names the sandbox, what it uses, the limit and the fixes', () => {
    const e = diskLimitError(testSpec('inst', { key: 'session:hog' }), 'ab'.repeat(32), { layerBytes: 90 * MIB, ownDirBytes: 30 * MIB }, 100, ['/h/sandboxes/docker/x/home']);
    expect(e).toMatchObject({ code: 'disk_limit_exceeded' });
    expect(e.message).toBe(
      'sandbox "session:hog" (container abababababab) uses 120 MiB of disk (writable layer 90 MiB, its dirs under BERTH_HOME 30 MiB), ' +
      'over its limit of 100 MiB (docker.diskMb), so it was stopped. Remove it with berth rm (same scope flags; its files go with it) ' +
      'and start again, delete files under /h/sandboxes/docker/x/home on the host, or raise docker.diskMb in the config',
    );
  });
});
