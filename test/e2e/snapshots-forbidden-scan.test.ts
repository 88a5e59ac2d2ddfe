import { mkdirSync, symlinkSync, writeFileSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { findForbidden } from '../../src/backends/plumbing/forbidden-scan.js';
import { tempDir } from '../helpers/temp-dir.js';

/* The scan a snapshot runs over the files it holds, on real files with the real grep. */

describe('snapshot forbidden-value scan', () => {
  const value = 'sk-live-0123456789abcdef';
  const forbidden = [{ name: 'API_KEY', value }, { name: 'MULTI', value: 'line-one\nline-two-secret' }];

  it('finds a value in a file, names the variable and the in-sandbox path', async () => {
    const dir = tempDir();
    mkdirSync(join(dir, 'a', 'b'), { recursive: true });
    writeFileSync(join(dir, 'a', 'b', 'conf'), Buffer.concat([Buffer.alloc(3 << 20), Buffer.from(value)]));
    expect(await findForbidden([{ hostDir: dir, sandboxDir: '/workspace' }], forbidden)).toEqual({ name: 'API_KEY', sandboxPath: '/workspace/a/b/conf' });
  });

  it('finds a value with a newline across a read boundary, and one in a file name or a link target', async () => {
    const dir = tempDir();
    writeFileSync(join(dir, 'x.bin'), Buffer.concat([Buffer.alloc((1 << 20) - 5), Buffer.from('line-one\nline-two-secret')]));
    expect(await findForbidden([{ hostDir: dir, sandboxDir: '/h' }], forbidden)).toEqual({ name: 'MULTI', sandboxPath: '/h/x.bin' });
    const named = tempDir();
    writeFileSync(join(named, `f-${value}`), 'x');
    expect((await findForbidden([{ hostDir: named, sandboxDir: '/h' }], forbidden))?.name).toBe('API_KEY');
    const linked = tempDir();
    symlinkSync(`/nowhere/${value}`, join(linked, 'l'));
    expect(await findForbidden([{ hostDir: linked, sandboxDir: '/h' }], forbidden)).toEqual({ name: 'API_KEY', sandboxPath: '/h/l' });
  });

  it('never follows a link nor opens a FIFO, and ignores values shorter than the redactor\'s minimum', async () => {
    const dir = tempDir();
    const outside = tempDir();
    writeFileSync(join(outside, 'host-file'), value);
    symlinkSync(join(outside, 'host-file'), join(dir, 'to-file'));
    symlinkSync(outside, join(dir, 'to-dir'));
    execFileSync('mkfifo', [join(dir, 'fifo')]);
    writeFileSync(join(dir, 'short'), 'abc');
    expect(await findForbidden([{ hostDir: dir, sandboxDir: '/h' }], [...forbidden, { name: 'SHORT', value: 'abc' }])).toBeUndefined();
  });
});
