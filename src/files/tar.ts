import type { Readable } from 'node:stream';

/*
 * A small tar writer and streaming reader: enough of ustar, GNU long names and pax path/size
 * records to carry files and folders between berth and a sandbox's own `tar` (GNU, busybox,
 * bsdtar), with no dependency. Berth writes only regular files and directories; the reader
 * reports every entry's type and lets the caller decide what to keep.
 */

const BLOCK = 512;
/** The largest size a 12-byte octal field holds (8 GiB - 1); berth's caps stay far below. */
export const TAR_MAX_ENTRY_BYTES = 8 ** 11 - 1;

export type TarEntryType = 'file' | 'dir' | 'symlink' | 'hardlink' | 'other';

export interface TarWriteEntry {
  /** Relative `/`-separated path; directories may end in `/`. */
  name: string;
  type: 'file' | 'dir';
  mode: number;
  /** File content (files only). */
  data?: Buffer;
  mtimeMs?: number;
}

export interface TarHeader {
  /** The entry's path as stored (pax/GNU long name applied), not yet validated. */
  name: string;
  type: TarEntryType;
  /** Raw type flag, for messages. */
  flag: string;
  mode: number;
  size: number;
  linkName: string;
}

function writeString(block: Buffer, offset: number, length: number, value: string): void {
  const bytes = Buffer.from(value, 'utf8');
  if (bytes.length > length) throw new Error(`tar field too long: ${value}`);
  bytes.copy(block, offset);
}

function writeOctal(block: Buffer, offset: number, length: number, value: number): void {
  writeString(block, offset, length, `${value.toString(8).padStart(length - 1, '0')}\0`);
}

function header(name: string, flag: string, mode: number, size: number, mtimeMs: number): Buffer {
  const block = Buffer.alloc(BLOCK);
  writeString(block, 0, 100, name);
  writeOctal(block, 100, 8, mode & 0o7777);
  writeOctal(block, 108, 8, 0);
  writeOctal(block, 116, 8, 0);
  writeOctal(block, 124, 12, size);
  writeOctal(block, 136, 12, Math.floor(mtimeMs / 1000));
  block.fill(0x20, 148, 156);
  writeString(block, 156, 1, flag);
  writeString(block, 257, 6, 'ustar');
  writeString(block, 263, 2, '00');
  writeString(block, 265, 32, 'root');
  writeString(block, 297, 32, 'root');
  let sum = 0;
  for (const byte of block) sum += byte;
  writeString(block, 148, 8, `${sum.toString(8).padStart(6, '0')}\0 `);
  return block;
}

function padding(size: number): Buffer {
  const rest = size % BLOCK;
  return rest === 0 ? Buffer.alloc(0) : Buffer.alloc(BLOCK - rest);
}

/**
 * Serialises entries as one tar archive (ustar; names over 100 bytes get a GNU long-name record).
 *
 * @example
 * const tar = writeTar([{ name: 'notes/', type: 'dir', mode: 0o755 }, { name: 'notes/a.txt', type: 'file', mode: 0o644, data: Buffer.from('hi') }]);
 */
export function writeTar(entries: readonly TarWriteEntry[]): Buffer {
  const parts: Buffer[] = [];
  for (const e of entries) {
    const data = e.type === 'file' ? e.data ?? Buffer.alloc(0) : Buffer.alloc(0);
    parts.push(tarEntryHeader({ name: e.name, type: e.type, mode: e.mode, size: data.length, mtimeMs: e.mtimeMs }));
    if (data.length > 0) parts.push(data, tarPadding(data.length));
  }
  parts.push(tarEnd());
  return Buffer.concat(parts);
}

/**
 * The header block(s) of one entry, for writers that stream the content themselves: the content
 * (`size` bytes) follows, then `tarPadding(size)`; `tarEnd()` closes the archive.
 */
export function tarEntryHeader(e: { name: string; type: 'file' | 'dir'; mode: number; size: number; mtimeMs?: number | undefined }): Buffer {
  const name = e.type === 'dir' && !e.name.endsWith('/') ? `${e.name}/` : e.name;
  const size = e.type === 'file' ? e.size : 0;
  if (size > TAR_MAX_ENTRY_BYTES) throw new Error(`tar entry ${name} is larger than ${TAR_MAX_ENTRY_BYTES} bytes`);
  const parts: Buffer[] = [];
  let stored = name;
  if (Buffer.byteLength(name) > 100) {
    const long = Buffer.from(`${name}\0`, 'utf8');
    parts.push(header('././@LongLink', 'L', 0o644, long.length, 0), long, padding(long.length));
    stored = truncateUtf8(name, 100);
  }
  parts.push(header(stored, e.type === 'dir' ? '5' : '0', e.mode, size, e.mtimeMs ?? Date.now()));
  return Buffer.concat(parts);
}

/** Zero bytes that round an entry's content of `size` bytes up to the 512-byte block. */
export function tarPadding(size: number): Buffer {
  return padding(size);
}

/** The two zero blocks that end an archive. */
export function tarEnd(): Buffer {
  return Buffer.alloc(BLOCK * 2);
}

/** The stream of a one-file archive gave more or fewer bytes than its header announced. */
export class TarSizeMismatchError extends Error {
  constructor(readonly expected: number, readonly got: number, readonly more: boolean) {
    super(more ? `the content is longer than the ${expected} bytes announced` : `the content ended after ${got} of the ${expected} bytes announced`);
  }
}

/**
 * A tar archive streamed as it is produced: `dirs`, then one file whose `size` content bytes come
 * from `source` (the header needs the size up front, so it is given, and held to: a source that
 * gives more or fewer bytes fails the stream with `TarSizeMismatchError`). Nothing is buffered
 * beyond the chunk in hand.
 *
 * @example
 * Readable.from(tarStreamOfFile([], { name: 'big.bin', mode: 0o644, size }, request));
 */
export async function* tarStreamOfFile(
  dirs: readonly TarWriteEntry[],
  file: { name: string; mode: number; size: number },
  source: AsyncIterable<Uint8Array>,
): AsyncGenerator<Buffer> {
  for (const d of dirs) yield tarEntryHeader({ ...d, type: 'dir', size: 0 });
  yield tarEntryHeader({ ...file, type: 'file' });
  let got = 0;
  for await (const chunk of source) {
    const b = Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
    got += b.length;
    if (got > file.size) throw new TarSizeMismatchError(file.size, got, true);
    if (b.length > 0) yield b;
  }
  if (got !== file.size) throw new TarSizeMismatchError(file.size, got, false);
  yield tarPadding(file.size);
  yield tarEnd();
}

/** The longest prefix of `s` whose UTF-8 form fits `bytes` (the ustar name of a long-named entry is informative only). */
function truncateUtf8(s: string, bytes: number): string {
  let out = '';
  for (const ch of s) {
    if (Buffer.byteLength(out + ch) > bytes) break;
    out += ch;
  }
  return out;
}

function readString(block: Buffer, offset: number, length: number): string {
  const field = block.subarray(offset, offset + length);
  const end = field.indexOf(0);
  return field.subarray(0, end === -1 ? length : end).toString('utf8');
}

function readNumber(block: Buffer, offset: number, length: number): number {
  const field = block.subarray(offset, offset + length);
  if ((field[0]! & 0x80) !== 0) {
    // GNU base-256 for large values.
    let value = 0;
    for (let i = 1; i < field.length; i++) value = value * 256 + field[i]!;
    return value;
  }
  const text = readString(block, offset, length).trim();
  if (text === '') return 0;
  if (!/^[0-7]+$/.test(text)) throw new TarFormatError(`bad number field "${text}"`);
  return parseInt(text, 8);
}

function checksumOk(block: Buffer): boolean {
  let sum = 0;
  for (let i = 0; i < BLOCK; i++) sum += i >= 148 && i < 156 ? 0x20 : block[i]!;
  return readNumber(block, 148, 8) === sum;
}

function typeOf(flag: string): TarEntryType {
  switch (flag) {
    case '0': case '\0': case '': case '7': return 'file';
    case '5': return 'dir';
    case '2': return 'symlink';
    case '1': return 'hardlink';
    default: return 'other';
  }
}

/** A malformed or truncated archive. */
export class TarFormatError extends Error {}

/** Parses pax `len key=value\n` records; only path, linkpath and size matter here. */
function parsePax(data: Buffer): Record<string, string> {
  const out: Record<string, string> = {};
  let i = 0;
  while (i < data.length) {
    const space = data.indexOf(0x20, i);
    if (space < 0) break;
    const len = parseInt(data.subarray(i, space).toString('ascii'), 10);
    if (!Number.isFinite(len) || len <= 0) throw new TarFormatError('bad pax record');
    const record = data.subarray(space + 1, i + len - 1).toString('utf8');
    const eq = record.indexOf('=');
    if (eq > 0) out[record.slice(0, eq)] = record.slice(eq + 1);
    i += len;
  }
  return out;
}

export interface TarEntrySink {
  write(chunk: Buffer): Promise<void> | void;
  end(): Promise<void> | void;
}

/**
 * Reads a tar stream entry by entry. `onEntry` returns a sink for the entry's content, or
 * undefined to skip it. Throws `TarFormatError` for a bad header or an archive that ends early.
 * Returns the number of entries seen.
 */
export async function readTar(
  source: Readable | AsyncIterable<Buffer>,
  onEntry: (h: TarHeader) => Promise<TarEntrySink | undefined> | TarEntrySink | undefined,
): Promise<number> {
  let buf: Buffer = Buffer.alloc(0);
  let entries = 0;
  let ended = false;
  // Meta records (GNU long name, pax) apply to the next real entry.
  let longName: string | undefined;
  let longLink: string | undefined;
  let pax: Record<string, string> = {};
  let state: { kind: 'header' } | { kind: 'body'; left: number; pad: number; sink: TarEntrySink | undefined; meta?: { flag: string; parts: Buffer[] } } = { kind: 'header' };

  for await (const chunk of source as AsyncIterable<Buffer>) {
    buf = buf.length === 0 ? chunk : Buffer.concat([buf, chunk]);
    for (;;) {
      if (ended) break;
      if (state.kind === 'header') {
        if (buf.length < BLOCK) break;
        const block = buf.subarray(0, BLOCK);
        buf = buf.subarray(BLOCK);
        if (block.every((b) => b === 0)) {
          ended = true;
          break;
        }
        if (!checksumOk(block)) throw new TarFormatError('bad header checksum');
        const flag = String.fromCharCode(block[156]!).replace('\0', '0');
        const size = readNumber(block, 124, 12);
        const pad = (BLOCK - (size % BLOCK)) % BLOCK;
        if (flag === 'L' || flag === 'K' || flag === 'x' || flag === 'g') {
          if (size > 1024 * 1024) throw new TarFormatError('meta record too large');
          state = { kind: 'body', left: size, pad, sink: undefined, meta: { flag, parts: [] } };
          continue;
        }
        const prefix = readString(block, 345, 155);
        const magic = readString(block, 257, 6);
        const stored = magic.startsWith('ustar') && prefix !== '' && readString(block, 263, 2) === '00' ? `${prefix}/${readString(block, 0, 100)}` : readString(block, 0, 100);
        const h: TarHeader = {
          name: pax['path'] ?? longName ?? stored,
          type: typeOf(flag),
          flag,
          mode: readNumber(block, 100, 8),
          size: pax['size'] !== undefined ? Number(pax['size']) : size,
          linkName: pax['linkpath'] ?? longLink ?? readString(block, 157, 100),
        };
        longName = undefined;
        longLink = undefined;
        pax = {};
        entries++;
        const bodySize = h.type === 'dir' || h.type === 'symlink' || h.type === 'hardlink' ? size : h.size;
        const sink = await onEntry(h);
        state = { kind: 'body', left: bodySize, pad: (BLOCK - (bodySize % BLOCK)) % BLOCK, sink };
        continue;
      }
      // body
      if (state.left > 0) {
        if (buf.length === 0) break;
        const take = Math.min(state.left, buf.length);
        const part = buf.subarray(0, take);
        buf = buf.subarray(take);
        state.left -= take;
        if (state.meta) state.meta.parts.push(Buffer.from(part));
        else if (state.sink) await state.sink.write(part);
        if (state.left > 0) continue;
      }
      if (buf.length < state.pad) break;
      buf = buf.subarray(state.pad);
      if (state.meta) {
        const data = Buffer.concat(state.meta.parts);
        if (state.meta.flag === 'L') longName = readString(data, 0, data.length);
        else if (state.meta.flag === 'K') longLink = readString(data, 0, data.length);
        else if (state.meta.flag === 'x') pax = parsePax(data);
      } else if (state.sink) {
        await state.sink.end();
      }
      state = { kind: 'header' };
    }
    if (ended) break;
  }
  if (!ended && (state.kind === 'body' || buf.length > 0)) throw new TarFormatError('archive ends in the middle of an entry');
  if (!ended && entries === 0) throw new TarFormatError('empty archive');
  return entries;
}
