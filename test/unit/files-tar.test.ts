import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import { readTar, TarFormatError, writeTar, type TarHeader } from '../../src/files/tar.js';

async function entries(tar: Buffer, chunk = 512 * 7 + 3): Promise<{ h: TarHeader; data: Buffer }[]> {
  const out: { h: TarHeader; data: Buffer }[] = [];
  const parts: Buffer[] = [];
  for (let i = 0; i < tar.length; i += chunk) parts.push(tar.subarray(i, i + chunk));
  await readTar(Readable.from(parts), (h) => {
    const data: Buffer[] = [];
    return { write: (c) => void data.push(Buffer.from(c)), end: () => void out.push({ h, data: Buffer.concat(data) }) };
  });
  return out;
}

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

describe('tar writer and reader', () => {
  const long = `${'deep/'.repeat(30)}a-file-with-a-long-name.txt`;

  it('round-trips files, dirs, empty files and names over 100 bytes, in any chunking', async () => {
    const data = Buffer.from(Array.from({ length: 5000 }, (_, i) => i % 251));
    const tar = await writeTar([
      { name: 'top', type: 'dir', mode: 0o755 },
      { name: 'top/a.bin', type: 'file', mode: 0o600, data },
      { name: 'top/empty', type: 'file', mode: 0o644, data: Buffer.alloc(0) },
      { name: long, type: 'file', mode: 0o644, data: Buffer.from('x') },
    ]);
    for (const chunk of [1, 100, 512, 4096, tar.length]) {
      const got = await entries(tar, chunk);
      expect(got.map((e) => [e.h.name, e.h.type, e.h.mode, e.data.length])).toEqual([
        ['top/', 'dir', 0o755, 0], ['top/a.bin', 'file', 0o600, 5000], ['top/empty', 'file', 0o644, 0], [long, 'file', 0o644, 1],
      ]);
      expect(got[1]!.data.equals(data)).toBe(true);
    }
  });

  it('GNU tar reads what berth writes, and berth reads what GNU tar writes (long names, symlinks)', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'berth-tar-'));
    dirs.push(dir);
    writeFileSync(join(dir, 'ours.tar'), await writeTar([{ name: long, type: 'file', mode: 0o640, data: Buffer.from('hello') }]));
    mkdirSync(join(dir, 'out'));
    execFileSync('tar', ['-x', '-f', join(dir, 'ours.tar'), '-C', join(dir, 'out')]);
    expect(readFileSync(join(dir, 'out', long), 'utf8')).toBe('hello');
    execFileSync('ln', ['-s', '/etc/passwd', join(dir, 'out', 'link')]);
    const theirs = execFileSync('tar', ['-c', '-f', '-', '-C', join(dir, 'out'), '.']);
    const got = await entries(theirs);
    const byName = Object.fromEntries(got.map((e) => [e.h.name.replace(/^\.\//, ''), e]));
    expect(byName[long]?.data.toString()).toBe('hello');
    expect(byName['link']?.h).toMatchObject({ type: 'symlink', linkName: '/etc/passwd' });
  });

  it('a truncated archive or a corrupt header is an error, never a short success', async () => {
    const tar = await writeTar([{ name: 'a', type: 'file', mode: 0o644, data: Buffer.alloc(2000, 1) }]);
    await expect(entries(tar.subarray(0, 1024))).rejects.toBeInstanceOf(TarFormatError);
    const bad = Buffer.from(tar);
    bad[10] = 0x41;
    await expect(entries(bad)).rejects.toThrow(/checksum/);
    await expect(entries(Buffer.alloc(0))).rejects.toThrow(/empty archive/);
  });
});
