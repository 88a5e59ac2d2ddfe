import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { MIN_SPILL_CAP_BYTES, OutputCapture, TextWindow, spillCapBytes } from '../../src/shell/output-capture.js';
import { BeginScanner, MarkerScanner, beginKey, buildFrame, printfFormat, shQuote } from '../../src/shell/protocol.js';

describe('TextWindow', () => {
  it('returns everything under the limit and head + notice + tail over it', () => {
    const w = new TextWindow(10);
    w.push('12345');
    w.push('67890');
    expect(w.text(() => 'N')).toBe('1234567890');
    w.push('abcdef');
    expect(w.truncated).toBe(true);
    expect(w.text((n) => `[${n}]`)).toBe('12345\n[6]\nbcdef');
  });
});

describe('OutputCapture', () => {
  const dirs: string[] = [];
  afterEach(() => {
    for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
  });

  it('decodes per stream so interleaving never splits a multi-byte char', () => {
    const c = new OutputCapture({ maxChars: 100, spillDir: '/nonexistent', spillStem: 's' });
    const e = Buffer.from('é');
    c.push('stdout', e.subarray(0, 1));
    c.push('stderr', Buffer.from('x'));
    c.push('stdout', e.subarray(1));
    const r = c.finish();
    expect(r.stdout).toBe('é');
    expect(r.output).toBe('xé');
    expect(r.truncated).toBe(false);
    expect(r.fullOutputPath).toBeUndefined();
  });

  it('keeps memory bounded and spills the full redacted stream', () => {
    const dir = mkdtempSync(join(tmpdir(), 'berth-cap-'));
    dirs.push(dir);
    const c = new OutputCapture({ maxChars: 50, spillDir: join(dir, 'spill'), spillStem: 's', redactValues: ['topsecret!'] });
    const chunk = Buffer.from('line topsecret! ok\n');
    for (let i = 0; i < 10_000; i++) c.push(i % 2 === 0 ? 'stdout' : 'stderr', chunk);
    const r = c.finish();
    expect(r.truncated).toBe(true);
    const full = readFileSync(r.fullOutputPath as string, 'utf8');
    expect(full).toBe('line [REDACTED] ok\n'.repeat(10_000));
    expect(r.output).toMatch(/\[\.\.\. \d+ chars omitted; full output kept by berth \(fullOutputPath\) \.\.\.\]/);
    expect(r.output).not.toContain('topsecret!');
    // The notice names no host path: remote callers never see fullOutputPath.
    for (const text of [r.output, r.stdout, r.stderr]) expect(text).not.toContain(dir);
  });

  it('cuts the spill file at its cap and ends it with a line saying so', () => {
    const dir = mkdtempSync(join(tmpdir(), 'berth-cap-'));
    dirs.push(dir);
    const c = new OutputCapture({ maxChars: 50, spillDir: join(dir, 'spill'), spillStem: 's', maxSpillBytes: 4096 });
    const chunk = Buffer.from('0123456789abcdef'.repeat(64)); // 1 KiB
    for (let i = 0; i < 100; i++) c.push('stdout', chunk);
    const r = c.finish();
    expect(r.truncated).toBe(true);
    const full = readFileSync(r.fullOutputPath as string, 'utf8');
    expect(full.length).toBeLessThanOrEqual(4096);
    expect(full.startsWith('0123456789abcdef0123')).toBe(true);
    expect(full).toMatch(/\n\[berth: output cut here; the spill file keeps at most 4096 bytes, \d+ more bytes were not saved\]\n$/);
  });

  it('caps spills at 20 x maxOutputChars bytes, never under 10 MiB', () => {
    expect(spillCapBytes(50_000)).toBe(MIN_SPILL_CAP_BYTES);
    expect(MIN_SPILL_CAP_BYTES).toBe(10 * 1024 * 1024);
    expect(spillCapBytes(10_000_000)).toBe(200_000_000);
  });
});

describe('protocol', () => {
  it('finds a key split across chunks and keeps payload before it', () => {
    const got: Buffer[] = [];
    const s = new MarkerScanner(Buffer.from('KEY~'), (b) => got.push(b));
    const data = 'payload KEY KEY~0 /tmpKEY~';
    for (const ch of data) s.push(Buffer.from(ch));
    expect(Buffer.concat(got).toString()).toBe('payload KEY ');
    expect(s.trailer?.toString()).toBe('0 /tmp');
  });

  it('drops the begin marker once, split anywhere, passing every other byte on in order', () => {
    const data = 'job out K^cmd K^ again K';
    for (const size of [1, 2, 3, data.length]) {
      const got: Buffer[] = [];
      const s = new BeginScanner(beginKey('K'), (b) => got.push(b));
      for (let i = 0; i < data.length; i += size) s.push(Buffer.from(data.slice(i, i + size)));
      expect(s.seen).toBe(true);
      s.flush();
      expect(Buffer.concat(got).toString()).toBe('job out cmd K^ again K');
    }
    // Without it, nothing is lost: what was held back comes out at the flush.
    const got: Buffer[] = [];
    const s = new BeginScanner(beginKey('K'), (b) => got.push(b));
    s.push(Buffer.from('abc K'));
    expect(Buffer.concat(got).toString()).toBe('abc ');
    s.flush();
    expect(s.seen).toBe(false);
    expect(Buffer.concat(got).toString()).toBe('abc K');
  });

  it('quotes any text for bash', () => {
    expect(shQuote(`a'b`)).toBe(`'a'\\''b'`);
    expect(printfFormat(Buffer.from([0x25, 0x5c, 0x27, 0, 0x41]))).toBe('%%\\\\\\047\\000A');
  });

  it('never puts a marker key itself in the frame', () => {
    const f = buildFrame({ command: 'echo hi', nonce: 'N0nce', tag: 't', stdinPath: '/x', stdinIsNull: false, hadJobs: true, workdir: '/w' });
    expect(f).not.toContain('N0nce~');
    expect(f).not.toContain(beginKey('N0nce').toString());
    expect(f.split('\n')).toHaveLength(2);
  });
});
