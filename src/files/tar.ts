import type { Readable } from 'node:stream';
import { extract, pack, type Header } from 'tar-stream';

/*
 * Tar in and out of a sandbox on tar-stream: the archive format (ustar, pax and GNU long names,
 * base-256 sizes) is tar-stream's; what berth adds is its own contract around it. The reader
 * reports every entry's type and lets the caller decide what to keep (uploads refuse links and
 * special files, exports skip them); the writer writes only regular files and directories and
 * holds a streamed file to the size its header announced.
 */

/** The largest size a 12-byte octal field holds (8 GiB - 1); berth's caps stay far below. */
const TAR_MAX_ENTRY_BYTES = 8 ** 11 - 1;

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

/** An entry of a streamed archive: a directory, or a file whose `size` bytes come from `content`. */
export type TarStreamEntry =
  | { name: string; type: 'dir'; mode: number; mtimeMs?: number | undefined }
  | { name: string; type: 'file'; mode: number; mtimeMs?: number | undefined; size: number; content: AsyncIterable<Uint8Array> | Iterable<Uint8Array> };

export interface TarHeader {
  /** The entry's path as stored (pax/GNU long name applied), not yet validated. */
  name: string;
  type: TarEntryType;
  /** The entry's type as the archive names it (`fifo`, `character-device`, ...), for messages. */
  typeName: string;
  mode: number;
  size: number;
  linkName: string;
}

/** A malformed or truncated archive. */
export class TarFormatError extends Error {}

/** The stream of a one-file archive gave more or fewer bytes than its header announced. */
export class TarSizeMismatchError extends Error {
  constructor(readonly expected: number, readonly got: number, readonly more: boolean) {
    super(more ? `the content is longer than the ${expected} bytes announced` : `the content ended after ${got} of the ${expected} bytes announced`);
  }
}

// --- writing ---

/*
 * The file-type bits of st_mode. tar-stream replaces a mode of 0 by its default (0644 or 0755);
 * with the type bit set the mode is never 0, and the header keeps only the low 12 bits, so a
 * file written with mode 000 stays 000.
 */
const S_IFREG = 0o100000;
const S_IFDIR = 0o040000;

function headerOf(e: TarStreamEntry): Header {
  const dir = e.type === 'dir';
  const size = dir ? 0 : e.size;
  if (!Number.isSafeInteger(size) || size < 0) throw new Error(`tar entry ${e.name} has a bad size ${String(size)}`);
  if (size > TAR_MAX_ENTRY_BYTES) throw new Error(`tar entry ${e.name} is larger than ${TAR_MAX_ENTRY_BYTES} bytes`);
  return {
    name: dir && !e.name.endsWith('/') ? `${e.name}/` : e.name,
    type: dir ? 'directory' : 'file',
    mode: (dir ? S_IFDIR : S_IFREG) | (e.mode & 0o7777),
    size,
    mtime: new Date(e.mtimeMs ?? Date.now()),
    uid: 0,
    gid: 0,
    uname: 'root',
    gname: 'root',
  } as Header;
}

type Emitter = { destroyed: boolean; on(event: string, fn: () => void): unknown; off(event: string, fn: () => void): unknown };

/** Resolves at the first of `events` (or at once when the stream is gone), leaving no listener behind. */
function first(stream: Emitter, events: string[]): Promise<void> {
  if (stream.destroyed) return Promise.resolve();
  return new Promise<void>((resolve) => {
    const done = (): void => {
      for (const ev of events) stream.off(ev, done);
      resolve();
    };
    for (const ev of events) stream.on(ev, done);
  });
}

const closedEarly = (): Error => new Error('the tar stream was closed before its end');

/** Writes the entries into `p` one after the other, each file held to its announced size. */
async function feedPack(p: ReturnType<typeof pack>, entries: AsyncIterable<TarStreamEntry> | Iterable<TarStreamEntry>): Promise<void> {
  for await (const e of entries) {
    if (p.destroyed) throw closedEarly();
    // The entry's callback is the one signal for every kind of entry: a directory is done as soon
    // as its header is out (its sink never emits 'finish'), a file once its bytes are, and a
    // destroyed pack calls it with the error.
    let sink!: ReturnType<typeof p.entry>;
    const written = new Promise<void>((resolve, reject) => {
      sink = p.entry(headerOf(e), (err?: Error | null) => (err ? reject(err) : resolve()));
    });
    // The entry's failure reaches us through the callback and the pack's own error; without
    // these, a sink destroyed with the pack would throw its error as an uncaught exception.
    written.catch(() => undefined);
    sink.on('error', () => undefined);
    if (e.type === 'file') {
      let got = 0;
      for await (const chunk of e.content) {
        got += chunk.byteLength;
        // Checked before the chunk is written: bytes past the announced size would be read by the
        // sandbox's tar as the next header, an entry the caller made up.
        if (got > e.size) throw new TarSizeMismatchError(e.size, got, true);
        if (sink.destroyed) throw closedEarly();
        if (chunk.byteLength > 0 && !sink.write(chunk)) await first(sink, ['drain', 'close']);
      }
      if (got !== e.size) throw new TarSizeMismatchError(e.size, got, false);
      sink.end(undefined);
    }
    await written;
    if (p.destroyed) throw closedEarly();
  }
  p.finalize();
}

/**
 * A tar archive streamed as it is produced: each file's content is read only as the consumer
 * takes the archive, never buffered beyond the chunk in hand. A file whose content gives more
 * or fewer bytes than its `size` fails the stream with `TarSizeMismatchError`, before a byte
 * past the announced size is written.
 *
 * @example
 * Readable.from(tarStream([{ name: 'out', type: 'dir', mode: 0o755 }, { name: 'out/a.bin', type: 'file', mode: 0o644, size, content }]));
 */
export async function* tarStream(entries: AsyncIterable<TarStreamEntry> | Iterable<TarStreamEntry>): AsyncGenerator<Buffer> {
  const p = pack();
  // The feeder stops on its own once the pack is destroyed (a consumer that left, or its error).
  void feedPack(p, entries).catch((err: unknown) => p.destroy(err instanceof Error ? err : new Error(String(err))));
  try {
    for await (const chunk of p) yield chunk as Buffer;
  } finally {
    p.destroy();
  }
}

/**
 * Serialises entries as one tar archive.
 *
 * @example
 * const tar = await writeTar([{ name: 'notes/', type: 'dir', mode: 0o755 }, { name: 'notes/a.txt', type: 'file', mode: 0o644, data: Buffer.from('hi') }]);
 */
export async function writeTar(entries: readonly TarWriteEntry[]): Promise<Buffer> {
  const parts: Buffer[] = [];
  for await (const chunk of tarStream(entries.map(asStreamEntry))) parts.push(chunk);
  return Buffer.concat(parts);
}

function asStreamEntry(e: TarWriteEntry): TarStreamEntry {
  if (e.type === 'dir') return { name: e.name, type: 'dir', mode: e.mode, mtimeMs: e.mtimeMs };
  const data = e.data ?? Buffer.alloc(0);
  return { name: e.name, type: 'file', mode: e.mode, mtimeMs: e.mtimeMs, size: data.length, content: [data] };
}

/**
 * `dirs`, then one file whose `size` content bytes come from `source`, as a streamed archive (see
 * `tarStream`: the size is given up front and held to).
 *
 * @example
 * Readable.from(tarStreamOfFile([], { name: 'big.bin', mode: 0o644, size }, request));
 */
export function tarStreamOfFile(
  dirs: readonly TarWriteEntry[],
  file: { name: string; mode: number; size: number },
  source: AsyncIterable<Uint8Array>,
): AsyncGenerator<Buffer> {
  return tarStream([
    ...dirs.map((d): TarStreamEntry => ({ name: d.name, type: 'dir', mode: d.mode, mtimeMs: d.mtimeMs })),
    { ...file, type: 'file', content: source },
  ]);
}

// --- reading ---

function typeOf(type: Header['type'] | null): TarEntryType {
  switch (type) {
    case 'file': case 'contiguous-file': return 'file';
    case 'directory': return 'dir';
    case 'symlink': return 'symlink';
    case 'link': return 'hardlink';
    default: return 'other';
  }
}

/** tar-stream's messages for a malformed archive, in berth's words. */
const FORMAT_ERRORS: Record<string, string> = {
  'Invalid tar header. Maybe the tar is corrupted or it needs to be gunzipped?': 'bad header checksum (a corrupt archive, or a compressed one: send plain tar)',
  'Unexpected end of data': 'archive ends in the middle of an entry',
  'Header exceeds max size': 'meta record (pax or GNU long name) too large',
  'Invalid header': 'bad size field in a header',
};

export interface TarEntrySink {
  write(chunk: Buffer): Promise<void> | void;
  end(): Promise<void> | void;
}

/**
 * Reads a tar stream entry by entry. `onEntry` returns a sink for the entry's content, or
 * undefined to skip it; the archive is read only as fast as the sinks take it. Throws
 * `TarFormatError` for a bad header or an archive that ends early, the source's own error if it
 * fails, and whatever `onEntry` or a sink throws. Returns the number of entries seen.
 */
export async function readTar(
  source: Readable | AsyncIterable<Buffer>,
  onEntry: (h: TarHeader) => Promise<TarEntrySink | undefined> | TarEntrySink | undefined,
): Promise<number> {
  // Archives without the ustar magic (v7 tar) are read too: tar-stream refuses them by default.
  // (tar-stream reads the option; its type definitions predate it.)
  const ex = extract({ allowUnknownFormat: true } as Parameters<typeof extract>[0]);
  let bytes = 0;
  let sourceError: unknown;
  void (async () => {
    try {
      for await (const chunk of source as AsyncIterable<Buffer>) {
        if (ex.destroyed) return;
        bytes += chunk.length;
        if (!ex.write(chunk)) await first(ex, ['drain', 'close']);
      }
      ex.end(undefined);
    } catch (err) {
      sourceError = err;
      ex.destroy(err instanceof Error ? err : new Error(String(err)));
    }
  })();
  let entries = 0;
  // Errors of the archive and the source come out of the iterators; those of onEntry and the sinks are the caller's.
  const archive = async <T>(step: Promise<T>): Promise<T> => {
    try {
      return await step;
    } catch (err) {
      if (err === sourceError || !(err instanceof Error)) throw err;
      throw new TarFormatError(FORMAT_ERRORS[err.message] ?? err.message);
    }
  };
  const it = ex[Symbol.asyncIterator]();
  try {
    for (;;) {
      const next = await archive(it.next());
      if (next.done === true) break;
      const entry = next.value;
      entries++;
      const h = entry.header;
      const sink = await onEntry({
        name: h.name, type: typeOf(h.type), typeName: h.type ?? 'unknown', mode: h.mode, size: h.size, linkName: h.linkname ?? '',
      });
      const content = entry[Symbol.asyncIterator]();
      for (;;) {
        const part = await archive(content.next());
        if (part.done === true) break;
        if (sink !== undefined) await sink.write(part.value as Buffer);
      }
      await sink?.end();
    }
  } finally {
    ex.destroy();
  }
  if (entries === 0 && bytes === 0) throw new TarFormatError('empty archive');
  return entries;
}
