import { createHash, randomBytes } from 'node:crypto';
import { createReadStream, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import { Broker } from '../../src/broker/broker.js';
import { parseConfig } from '../../src/setup/parse-config.js';
import { isBerthError } from '../../src/errors.js';
import { describeDocker, dockerConfig, dockerSuiteHooks, installs } from '../helpers/docker-e2e.js';
import { tempDir } from '../helpers/temp-dir.js';

/*
 * `broker.files.uploadStream`, the same on every backend: a stream of a known size goes
 * into the sandbox as it arrives and lands byte-exact; the path and the size are checked before a
 * byte is read; a stream that is short, long or failing leaves nothing behind (no temp file, no dir
 * the upload created) and an existing file as it was.
 */

const sha = (b: Buffer): string => createHash('sha256').update(b).digest('hex');

/** An async iterable of `chunks` that records whether it was read, and can fail after them. */
function source(chunks: Buffer[], failAfter?: Error): AsyncIterable<Uint8Array> & { pulled: boolean } {
  const it = {
    pulled: false,
    async *[Symbol.asyncIterator](): AsyncGenerator<Uint8Array> {
      it.pulled = true;
      for (const c of chunks) yield c;
      if (failAfter) throw failAfter;
    },
  };
  return it;
}

async function codeOf(p: Promise<unknown>): Promise<string> {
  const err = await p.then(() => undefined, (e: unknown) => e);
  if (!isBerthError(err)) throw new Error(`expected a BerthError, got ${String(err)}`);
  return `${err.code}: ${err.message}`;
}

function uploadStreamSuite(backend: string, open: () => Promise<Broker>, dir: string): void {
  it(`${backend}: a 60 MB file read from disk lands byte-exact`, async () => {
    const broker = await open();
    const s = { session: 'big' };
    const data = randomBytes(60 * 1000 * 1000);
    const file = join(tempDir('berth-upstream-src-'), 'big.bin');
    writeFileSync(file, data);
    const r = await broker.files.uploadStream(s, { path: 'in/big.bin', size: data.length, stream: createReadStream(file) });
    expect(r.bytes).toBe(data.length);
    const inside = await broker.exec(s, `sha256sum ${r.path} | cut -d' ' -f1; find ${dir} -name '.berth-upload-*' | wc -l`);
    expect(inside.stdout).toBe(`${sha(data)}\n0\n`);
  }, 120_000);

  it(`${backend}: a short, long or failing stream leaves nothing behind and the existing file as it was`, async () => {
    const broker = await open();
    const s = { session: 'bad' };
    await broker.files.upload(s, { path: 'keep.txt', data: Buffer.from('old\n') });
    expect(await codeOf(broker.files.uploadStream(s, { path: 'keep.txt', size: 10, stream: source([Buffer.from('12345')]) })))
      .toMatch(/^usage: upload to ".*\/keep\.txt": the content ended after 5 of the 10 bytes announced; nothing was written$/);
    expect(await codeOf(broker.files.uploadStream(s, { path: 'new/deep/x.bin', size: 4, stream: source([Buffer.from('12345')]) })))
      .toMatch(/: the content is longer than the 4 bytes announced; nothing was written$/);
    expect(await codeOf(broker.files.uploadStream(s, {
      path: 'new/deep/y.bin', size: 3 * 1024 * 1024, stream: source([randomBytes(1024 * 1024)], new Error('sender went away')),
    }))).toMatch(/^upload_incomplete: upload to ".*\/new\/deep\/y\.bin" stopped after 1048576 of 3145728 bytes: the sender's stream failed \(sender went away\); nothing was written$/);
    const after = await broker.exec(s, `cat keep.txt; find ${dir} -name '.berth-upload-*' -o -name new | wc -l`);
    expect(after.stdout).toBe('old\n0\n');
  }, 120_000);

  it(`${backend}: a refused path or a size over files.maxBytes is refused before the stream is read`, async () => {
    const broker = await open();
    const s = { session: 'refuse' };
    const proc = source([Buffer.from('x')]);
    expect(await codeOf(broker.files.uploadStream(s, { path: '/proc/self/x', size: 1, stream: proc }))).toMatch(/^policy_refused: .*under \/proc/);
    expect(proc.pulled).toBe(false);
    const big = source([Buffer.from('x')]);
    expect(await codeOf(broker.files.uploadStream(s, { path: 'big.bin', size: 65 * 1024 * 1024, stream: big }))).toMatch(/^too_large: .*files\.maxBytes/);
    expect(big.pulled).toBe(false);
    expect(await codeOf(broker.files.uploadStream(s, { path: 'x', size: -1, stream: source([]) }))).toMatch(/^usage: size must be a whole number/);
  }, 120_000);
}

describe('broker.files.uploadStream on the local backend', () => {
  uploadStreamSuite('local', async () => {
    const broker = await Broker.open({
      config: parseConfig({ backend: 'local', persistent: false, files: { maxBytes: 64 * 1024 * 1024 } }),
      berthHome: tempDir('berth-upstream-'), env: { PATH: process.env['PATH'] },
    });
    onTestFinished(() => broker.close());
    return broker;
  }, '.');
});

const reg = installs('berth-upstream-');

describeDocker('broker.files.uploadStream on the real docker engine', () => {
  dockerSuiteHooks(reg);
  uploadStreamSuite('docker', () => reg.track().open(dockerConfig({ persistent: false, files: { maxBytes: 64 * 1024 * 1024 } })), '/workspace');
});
