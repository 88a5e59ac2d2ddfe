import { spawnSync } from 'node:child_process';
import { linkSync, mkdirSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { buffer } from 'node:stream/consumers';
import { expect, it } from 'vitest';
import { packDirs } from '../../src/backends/plumbing/snapshot-files.js';
import { tempDir } from '../helpers/temp-dir.js';

/*
 * A fork's tmpfs dirs go into its sandbox as one archive unpacked at `/`: each snapshot dir's
 * entries renamed for the dir they fill there (`home` is `/root`), link targets never renamed.
 */

it('packs several dirs as one archive, each renamed for where it goes; symlink targets and other dirs untouched', async () => {
  const parent = tempDir();
  mkdirSync(join(parent, 'home', 'sub'), { recursive: true });
  mkdirSync(join(parent, 'workspace'));
  mkdirSync(join(parent, 'homework'));
  writeFileSync(join(parent, 'home', 'a'), 'a');
  linkSync(join(parent, 'home', 'a'), join(parent, 'home', 'hard'));
  symlinkSync('home/a', join(parent, 'home', 'rel'));
  symlinkSync('/home/x', join(parent, 'home', 'abs'));
  writeFileSync(join(parent, 'workspace', 'w'), 'w');
  writeFileSync(join(parent, 'homework', 'not-asked'), 'n');
  const archive = await buffer(packDirs(parent, [{ name: 'home', as: 'root' }, { name: 'workspace', as: 'workspace' }]));
  const listed = spawnSync('tar', ['-tvf', '-'], { input: archive, encoding: 'utf8' });
  expect(listed.status, listed.stderr).toBe(0);
  const names = listed.stdout.trim().split('\n').map((l) => l.split(/\s+/).slice(5).join(' ')).sort();
  expect(names).toEqual([
    'root/',
    'root/a link to root/hard',
    'root/abs -> /home/x',
    'root/hard',
    'root/rel -> home/a',
    'root/sub/',
    'workspace/',
    'workspace/w',
  ]);
});

it('refuses a name that is not a plain dir name', () => {
  expect(() => packDirs(tempDir(), [{ name: '../etc', as: 'root' }])).toThrow(/not a plain dir name/);
  expect(() => packDirs(tempDir(), [{ name: 'home', as: 'root,x' }])).toThrow(/not a plain dir name/);
});
