import { chmodSync, mkdirSync, openSync, closeSync, symlinkSync, truncateSync, writeFileSync, writeSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { findForbidden } from '../../src/backends/plumbing/forbidden-scan.js';
import { isBerthError } from '../../src/errors.js';
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

  it('finds a value wherever it straddles two reads, and at the very start and end of a file', async () => {
    // A value with a newline is searched here (not by grep) in files of any size.
    const multi = 'line-one\nline-two-secret';
    for (const at of [0, (2 << 20) - 1, (2 << 20) - 12, (2 << 20) - multi.length + 1, 2 << 20, (3 << 20) - multi.length]) {
      const dir = tempDir();
      const file = join(dir, 'f.bin');
      writeFileSync(file, Buffer.alloc(3 << 20, 0x61));
      const fd = openSync(file, 'r+');
      writeSync(fd, multi, at);
      closeSync(fd);
      expect(await findForbidden([{ hostDir: dir, sandboxDir: '/h' }], forbidden), `value at ${at}`).toEqual({ name: 'MULTI', sandboxPath: '/h/f.bin' });
    }
    // Nothing there: nothing found (the seams are not matched against stale bytes).
    const clean = tempDir();
    writeFileSync(join(clean, 'f.bin'), Buffer.alloc(3 << 20, 0x61));
    expect(await findForbidden([{ hostDir: clean, sandboxDir: '/h' }], forbidden)).toBeUndefined();
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
  /** A newline-free file of `bytes` (sparse zeros) with `value` written at `at`. */
  const sparseWith = (file: string, bytes: number, at: number): void => {
    truncateSync(file, 0);
    truncateSync(file, bytes);
    const fd = openSync(file, 'r+');
    writeSync(fd, value, at);
    closeSync(fd);
  };

  it('keeps memory bounded on a huge file with no newline (grep would hold it whole) and still finds a value across a read boundary', async () => {
    const dir = tempDir();
    writeFileSync(join(dir, 'small.txt'), `token ${value}\n`);
    const big = join(dir, 'big.bin');
    writeFileSync(big, '');
    sparseWith(big, 64 << 20, (40 << 20) - 5);
    // The real grep, allowed 48 MiB of address space: one that got the 64 MiB line would fail.
    const bin = tempDir();
    writeFileSync(join(bin, 'grep'), `#!/bin/sh\nexec prlimit --as=${48 << 20} /usr/bin/grep "$@"\n`);
    chmodSync(join(bin, 'grep'), 0o755);
    const path = process.env['PATH'];
    process.env['PATH'] = `${bin}:${path ?? '/usr/bin:/bin'}`;
    try {
      expect(await findForbidden([{ hostDir: dir, sandboxDir: '/w' }], [{ name: 'API_KEY', value }])).toEqual({ name: 'API_KEY', sandboxPath: expect.stringMatching(/^\/w\/(small\.txt|big\.bin)$/) as unknown });
      writeFileSync(join(dir, 'small.txt'), 'nothing\n');
      expect(await findForbidden([{ hostDir: dir, sandboxDir: '/w' }], [{ name: 'API_KEY', value }])).toEqual({ name: 'API_KEY', sandboxPath: '/w/big.bin' });
    } finally {
      process.env['PATH'] = path;
    }
  });

  it('refuses, failing closed, when the scan cannot finish within its deadline', async () => {
    const dir = tempDir();
    const big = join(dir, 'big.bin');
    writeFileSync(big, '');
    truncateSync(big, 256 << 20);
    const err = await findForbidden([{ hostDir: dir, sandboxDir: '/w' }], forbidden, { deadlineMs: 1 }).then(() => undefined, (e: unknown) => e);
    expect(isBerthError(err) && err.code).toBe('policy_refused');
    expect((err as Error).message).toMatch(/could not all be searched for granted values within \d+ s/);
  });

  it('finds a value in an extended attribute\'s value or name, in any namespace, on a file or a dir, naming the entry', async () => {
    const dir = tempDir();
    mkdirSync(join(dir, 'd e', 'sub'), { recursive: true });
    writeFileSync(join(dir, 'd e', 'sub', 'plain'), 'nothing here');
    writeFileSync(join(dir, 'd e', 'sub', 'tagged\nname'), 'nothing here either');
    expect(await findForbidden([{ hostDir: dir, sandboxDir: '/w' }], forbidden)).toBeUndefined();
    execFileSync('setfattr', ['-n', 'user.note', '-v', `prefix-${value}-suffix`, join(dir, 'd e', 'sub', 'tagged\nname')]);
    expect(await findForbidden([{ hostDir: dir, sandboxDir: '/w' }], forbidden)).toEqual({ name: 'API_KEY', sandboxPath: '/w/d e/sub/tagged\nname' });
    const named = tempDir();
    mkdirSync(join(named, 'd'));
    execFileSync('setfattr', ['-n', `user.${value}`, '-v', 'x', join(named, 'd')]);
    expect(await findForbidden([{ hostDir: named, sandboxDir: '/w' }], forbidden)).toEqual({ name: 'API_KEY', sandboxPath: '/w/d' });
    // A value with a newline, set by root in the trusted namespace (hex on the wire: any byte).
    const trusted = tempDir();
    writeFileSync(join(trusted, 'f'), '');
    execFileSync('setfattr', ['-n', 'trusted.x', '-v', '0x' + Buffer.from('line-one\nline-two-secret').toString('hex'), join(trusted, 'f')]);
    expect(await findForbidden([{ hostDir: trusted, sandboxDir: '/w' }], forbidden)).toEqual({ name: 'MULTI', sandboxPath: '/w/f' });
  });

  it('refuses a snapshot of more entries than it may hold, naming the bound; walks one that fits, in dirs read as a stream', async () => {
    const dir = tempDir();
    for (let d = 0; d < 3; d++) {
      mkdirSync(join(dir, `d${d}`));
      for (let f = 0; f < 400; f++) writeFileSync(join(dir, `d${d}`, `f${f}`), 'x');
    }
    // 3 dirs and 1,200 files.
    expect(await findForbidden([{ hostDir: dir, sandboxDir: '/w' }], forbidden, { maxEntries: 1_203 })).toBeUndefined();
    const err = await findForbidden([{ hostDir: dir, sandboxDir: '/w' }], forbidden, { maxEntries: 1_202 }).then(() => undefined, (e: unknown) => e);
    expect(isBerthError(err) && err.code).toBe('policy_refused');
    expect((err as Error).message).toContain('more than 1202 files, dirs and links');
    // A value in the last file of the last dir is still found within the bound.
    writeFileSync(join(dir, 'd2', 'f399'), value);
    expect(await findForbidden([{ hostDir: dir, sandboxDir: '/w' }], forbidden, { maxEntries: 1_203 })).toEqual({ name: 'API_KEY', sandboxPath: '/w/d2/f399' });
  });
});
