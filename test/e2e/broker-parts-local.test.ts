import { execFileSync } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import { Broker } from '../../src/broker/broker.js';
import { parseConfig } from '../../src/setup/parse-config.js';
import { tempDir } from '../helpers/temp-dir.js';
import { sessionConformance, type SessionUnderTest } from '../conformance/session-conformance.js';

/*
 * The broker's parts as its users see them on the local backend: a session handle (the session
 * suite, which the remote client runs too, and the files calls that answer host paths), and
 * `reapers.every` (periodic tasks that stop with the broker).
 */

function open(opts: { reap?: boolean } = {}): Promise<Broker> {
  return Broker.open({
    config: parseConfig({ backend: 'local', persistent: false }), berthHome: tempDir('berth-parts-'), env: { PATH: process.env['PATH'] }, ...opts,
  });
}

async function until(what: string, ok: () => boolean): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (!ok()) {
    if (Date.now() > deadline) throw new Error(`never happened: ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

const pause = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

describe('a session handle on the local backend', () => {
  sessionConformance({
    name: 'in-process broker',
    open: async () => {
      const broker = await open();
      onTestFinished(() => broker.close());
      return {
        session: (scope): SessionUnderTest => broker.session(scope),
        auditKinds: async (session) => broker.audit({ tenant: 'local', session }).map((e) => e.kind),
      };
    },
  });

  it('files: a tar, an export and a media path (host paths: the library only), each audited under the session', async () => {
    await using broker = await open();
    const a = broker.session({ session: 'a' });
    await a.files.upload({ path: 'note.txt', data: Buffer.from('from a\n') });
    const src = tempDir('berth-parts-tar-');
    mkdirSync(join(src, 'dir'));
    writeFileSync(join(src, 'dir', 'in-tar.txt'), 'tarred\n');
    const tar = execFileSync('tar', ['-cf', '-', '-C', src, 'dir']);
    expect(await a.files.uploadTar({ dir: 'unpacked', tar })).toMatchObject({ entries: 2 });
    expect((await a.exec('cat unpacked/dir/in-tar.txt')).stdout).toBe('tarred\n');

    const exported = await a.files.exportPath({ path: 'note.txt' });
    expect(readFileSync(exported.hostPath, 'utf8')).toBe('from a\n');
    const media = await a.files.mediaPath('unpacked/dir/in-tar.txt');
    expect(readFileSync(media.hostPath, 'utf8')).toBe('tarred\n');

    const kinds = broker.audit({ tenant: 'local', session: 'a' }).map((e) => e.kind);
    expect(kinds.filter((k) => k !== 'exec').sort()).toEqual(['export', 'media', 'upload', 'upload']);
  });
});

describe('reapers.every: periodic tasks on the broker\'s reapers', () => {
  it('runs a task again and again, never two runs at once, until it is stopped (also when the broker does not reap)', async () => {
    await using broker = await open({ reap: false });
    let runs = 0;
    let running = 0;
    let overlapped = false;
    let release: () => void = () => undefined;
    const held = new Promise<void>((r) => (release = r));
    const stop = broker.reapers.every('test task', 10, async () => {
      runs++;
      running++;
      if (running > 1) overlapped = true;
      if (runs === 1) await held;
      running--;
    });
    await until('the first run', () => runs === 1);
    await pause(100); // many ticks while the first run is held
    expect(runs).toBe(1);
    release();
    await until('three runs', () => runs >= 3);
    stop();
    await until('the last run ends', () => running === 0);
    const after = runs;
    await pause(100);
    expect(runs).toBe(after);
    expect(overlapped).toBe(false);
  });

  it('closing the broker waits for a run under way and starts none after', async () => {
    const broker = await open();
    let started = 0;
    let finished = 0;
    let release: () => void = () => undefined;
    const held = new Promise<void>((r) => (release = r));
    broker.reapers.every('held task', 10, async () => {
      started++;
      await held;
      finished++;
    });
    await until('a run', () => started === 1);
    let closed = false;
    const closing = broker.close().then(() => {
      closed = true;
    });
    await pause(100);
    expect(closed).toBe(false);
    release();
    await closing;
    expect(finished).toBe(1);
    await pause(100);
    expect(started).toBe(1);
  });
});
