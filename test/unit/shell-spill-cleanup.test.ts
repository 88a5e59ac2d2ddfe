import { existsSync, mkdirSync, readdirSync, utimesSync, writeFileSync } from 'node:fs';

import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { Broker } from '../../src/broker/broker.js';
import { cleanSpillDir, spillMaxAgeMs } from '../../src/broker/spill.js';
import { parseConfig } from '../../src/setup/parse-config.js';
import { tempDir } from '../helpers/temp-dir.js';

const DAY_MS = 24 * 60 * 60 * 1000;

describe('spill files: start-up cleanup and deletion with the shell', () => {
  const home = (): string => tempDir('berth-spill-');
  const spillFile = (dir: string, name: string, ageMs: number): string => {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    const path = join(dir, name);
    writeFileSync(path, 'x', { mode: 0o600 });
    const t = (Date.now() - ageMs) / 1000;
    utimesSync(path, t, t);
    return path;
  };
  const open = (berthHome: string, holdSessions: boolean, config: Record<string, unknown> = {}): Promise<Broker> =>
    Broker.open({
      config: parseConfig({ backend: 'local', persistent: false, exec: { maxOutputChars: 1000 }, ...config }),
      berthHome,
      env: { PATH: process.env['PATH'] },
      holdSessions,
      reap: false,
    });

  it('the age limit is the longest idle time, at least 24 h', () => {
    expect(spillMaxAgeMs(parseConfig({ backend: 'local', lifecycle: { idleSeconds: 600 } }))).toBe(DAY_MS);
    expect(spillMaxAgeMs(parseConfig({ backend: 'local', lifecycle: { idleSeconds: 3 * 86_400 } }))).toBe(3 * DAY_MS);
  });

  it('cleanSpillDir removes old spill files only, and tolerates a missing dir', () => {
    const dir = join(home(), 'spill');
    expect(cleanSpillDir(dir, DAY_MS)).toBe(0);
    const old = spillFile(dir, 'a-1-00.out', 2 * DAY_MS);
    const fresh = spillFile(dir, 'b-2-00.out', 60_000);
    const other = spillFile(dir, 'notes.txt', 2 * DAY_MS);
    expect(cleanSpillDir(dir, DAY_MS)).toBe(1);
    expect([existsSync(old), existsSync(fresh), existsSync(other)]).toEqual([false, true, true]);
  });

  it('Broker.open removes an old spill file and keeps a fresh one', async () => {
    const h = home();
    const old = spillFile(join(h, 'spill'), 'old-1-00.out', 2 * DAY_MS);
    const fresh = spillFile(join(h, 'spill'), 'fresh-2-00.out', 60 * 60 * 1000);
    await using _broker = await open(h, true);
    expect(existsSync(old)).toBe(false);
    expect(existsSync(fresh)).toBe(true);
  });

  it("a held session's spill file is valid until the broker closes its shell, then gone", async () => {
    const h = home();
    const broker = await open(h, true);
    const r = await broker.exec({ session: 's' }, 'head -c 5000 /dev/zero | tr "\\0" x');
    expect(r.truncated).toBe(true);
    expect(r.output).toContain('full output kept by berth (fullOutputPath)');
    expect(r.output).not.toContain(h);
    const path = r.fullOutputPath as string;
    expect(path.startsWith(join(h, 'spill'))).toBe(true);
    expect(existsSync(path)).toBe(true);
    await broker.close();
    expect(existsSync(path)).toBe(false);
    expect(readdirSync(join(h, 'spill'))).toEqual([]);
  });

  it('a detached session\'s spill file goes when the broker closes; with spillOutput: false (the CLI) none is written', async () => {
    const h = home();
    const broker = await open(h, false);
    const r = await broker.exec({ session: 's' }, 'head -c 5000 /dev/zero | tr "\\0" x');
    expect(existsSync(r.fullOutputPath as string)).toBe(true);
    await broker.close();
    expect(existsSync(r.fullOutputPath as string)).toBe(false);
    const cli = await Broker.open({
      config: parseConfig({ backend: 'local', persistent: false, exec: { maxOutputChars: 1000 } }),
      berthHome: h, env: { PATH: process.env['PATH'] }, holdSessions: false, reap: false, spillOutput: false,
    });
    const c = await cli.exec({ session: 's' }, 'head -c 5000 /dev/zero | tr "\\0" x');
    expect(c.truncated).toBe(true);
    expect(c.fullOutputPath).toBeUndefined();
    expect(readdirSync(join(h, 'spill'))).toEqual([]);
    await cli.close();
  });
});
