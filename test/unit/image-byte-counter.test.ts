import { Readable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { byteCounter } from '../../src/backends/docker/image-build.js';

describe('the import byte counter of berth image build', () => {
  it('passes every byte through unchanged and reports the total every few MB and at the end', async () => {
    const reports: number[] = [];
    const chunks = Array.from({ length: 10 }, (_, i) => Buffer.alloc(1024 * 1024, i));
    const out: Buffer[] = [];
    await new Promise<void>((resolve, reject) => {
      Readable.from(chunks).pipe(byteCounter((t) => reports.push(t), 4 * 1024 * 1024))
        .on('data', (c: Buffer) => out.push(c)).on('end', resolve).on('error', reject);
    });
    expect(Buffer.concat(out).equals(Buffer.concat(chunks))).toBe(true);
    expect(reports).toEqual([4, 8, 10].map((mb) => mb * 1024 * 1024));
  });

  it('reports nothing more when the total was just reported', async () => {
    const reports: number[] = [];
    await new Promise<void>((resolve) => {
      Readable.from([Buffer.alloc(8)]).pipe(byteCounter((t) => reports.push(t), 8)).on('end', resolve).resume();
    });
    expect(reports).toEqual([8]);
  });
});
