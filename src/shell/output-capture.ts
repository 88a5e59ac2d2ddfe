import { closeSync, chmodSync, mkdirSync, openSync, rmSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { TextDecoder } from 'node:util';
import { ByteRedactor } from '../kit/redaction.js';

export type StreamName = 'stdout' | 'stderr';

/**
 * Keeps the first `headChars` and the last `limit - headChars` chars of a text stream, and the
 * exact total; memory stays O(limit + one chunk) however long the stream is.
 */
export class TextWindow {
  private head = '';
  private tail: string[] = [];
  private tailLen = 0;
  total = 0;
  private readonly headCap: number;
  private readonly tailCap: number;

  constructor(private readonly limit: number) {
    this.headCap = Math.floor(limit / 2);
    this.tailCap = limit - this.headCap;
  }

  push(s: string): void {
    if (s.length === 0) return;
    this.total += s.length;
    let rest = s;
    if (this.head.length < this.headCap) {
      const take = this.headCap - this.head.length;
      this.head += rest.slice(0, take);
      rest = rest.slice(take);
      if (rest.length === 0) return;
    }
    this.tail.push(rest);
    this.tailLen += rest.length;
    while (this.tail.length > 1 && this.tailLen - (this.tail[0] as string).length >= this.tailCap) {
      this.tailLen -= (this.tail.shift() as string).length;
    }
    if (this.tail.length === 1 && this.tailLen > this.tailCap * 2) {
      this.tail = [(this.tail[0] as string).slice(-this.tailCap)];
      this.tailLen = this.tailCap;
    }
  }

  get truncated(): boolean {
    return this.total > this.limit;
  }

  /** The whole text, or head + notice + tail when over the limit. */
  text(notice: (omitted: number) => string): string {
    const joined = this.tail.join('');
    if (!this.truncated) return this.head + joined.slice(joined.length - (this.total - this.head.length));
    let head = this.head;
    let tail = joined.slice(-this.tailCap);
    // Never cut a surrogate pair in half.
    if (/[\uD800-\uDBFF]$/.test(head)) head = head.slice(0, -1);
    if (/^[\uDC00-\uDFFF]/.test(tail)) tail = tail.slice(1);
    const omitted = this.total - head.length - tail.length;
    const sep = head.length === 0 || head.endsWith('\n') ? '' : '\n';
    return `${head}${sep}${notice(omitted)}\n${tail}`;
  }
}

/**
 * Bytes one command may spill: 20 x the output limit (chars; up to 4 bytes each, so ~5 full
 * windows of worst-case UTF-8 and plenty for ASCII), and never under 10 MiB so a small
 * `maxOutputChars` still keeps a useful log. A command printing more (by mistake or on purpose)
 * cannot fill the host disk: the file is cut at this size, ending in a line that says so. With
 * the largest allowed `maxOutputChars` (10M) that is 200 MB per command, and a shell keeps only
 * its last command's file (see PersistentShell).
 */
export function spillCapBytes(maxChars: number): number {
  return Math.max(20 * Math.max(1, Math.floor(maxChars)), MIN_SPILL_CAP_BYTES);
}

export const MIN_SPILL_CAP_BYTES = 10 * 1024 * 1024;
/** Room kept at the end of a cut spill file for the line that says it was cut. */
const CUT_LINE_RESERVE = 256;

export interface CaptureOptions {
  maxChars: number;
  /** Most bytes the spill file may hold, cut line included (default `spillCapBytes(maxChars)`). */
  maxSpillBytes?: number | undefined;
  /** Host dir for the spill file (created 0700); undefined: nothing is spilled (the caller streamed it all). */
  spillDir: string | undefined;
  /** File name stem for the spill file. */
  spillStem: string;
  redactValues?: readonly string[] | undefined;
  onChunk?: ((stream: StreamName, chunk: string) => void) | undefined;
}

export interface CaptureResult {
  stdout: string;
  stderr: string;
  output: string;
  truncated: boolean;
  fullOutputPath?: string;
}

/**
 * The output of one command: redaction (bytes), decoding (per stream, so a multi-byte char is
 * never split by interleaving), head/tail windows for stdout, stderr and combined output, and a
 * spill file with the full combined stream once the output passes the limit. Before the limit
 * is reached the raw bytes are kept in memory (at most ~4 bytes per char of the limit); after,
 * they go straight to the file.
 */
export class OutputCapture {
  private readonly redactors: Record<StreamName, ByteRedactor>;
  private readonly decoders: Record<StreamName, TextDecoder>;
  private readonly windows: Record<StreamName | 'output', TextWindow>;
  private pending: Buffer[] = [];
  private spillFd: number | undefined;
  private spillPath: string | undefined;
  private spillError: unknown;
  /** Bytes written to the spill file, and bytes dropped past its cap. */
  private spilled = 0;
  private spillDropped = 0;
  private readonly spillDataCap: number;
  private readonly spillCap: number;
  private finished = false;

  constructor(private readonly opts: CaptureOptions) {
    const values = opts.redactValues ?? [];
    this.redactors = { stdout: new ByteRedactor(values), stderr: new ByteRedactor(values) };
    this.decoders = {
      stdout: new TextDecoder('utf-8', { fatal: false, ignoreBOM: true }),
      stderr: new TextDecoder('utf-8', { fatal: false, ignoreBOM: true }),
    };
    const limit = Math.max(1, Math.floor(opts.maxChars));
    this.windows = { stdout: new TextWindow(limit), stderr: new TextWindow(limit), output: new TextWindow(limit) };
    const cap = opts.maxSpillBytes ?? spillCapBytes(limit);
    this.spillCap = Math.max(CUT_LINE_RESERVE * 2, Math.floor(cap));
    this.spillDataCap = this.spillCap - CUT_LINE_RESERVE;
  }

  push(stream: StreamName, raw: Buffer): void {
    if (this.finished || raw.length === 0) return;
    this.accept(stream, this.redactors[stream].push(raw), false);
  }

  /** Flush held-back bytes, close the spill file and build the result. Idempotent. */
  finish(): CaptureResult {
    if (!this.finished) {
      for (const s of ['stdout', 'stderr'] as const) this.accept(s, this.redactors[s].flush(), true);
      this.finished = true;
      if (this.spillFd !== undefined) {
        try {
          if (this.spillDropped > 0) {
            const line = `\n[berth: output cut here; the spill file keeps at most ${this.spillCap} bytes, ${this.spillDropped} more bytes were not saved]\n`;
            writeAll(this.spillFd, Buffer.from(line).subarray(0, CUT_LINE_RESERVE));
          }
          closeSync(this.spillFd);
        } catch {
          // the data is written; a failing close changes nothing for the caller
        }
        this.spillFd = undefined;
      }
      this.pending = [];
      // Opened on a byte estimate; multi-byte text may still have fitted.
      if (this.spillPath !== undefined && !this.windows.output.truncated) {
        rmSync(this.spillPath, { force: true });
        this.spillPath = undefined;
      }
    }
    const path = this.spillPath;
    // No host path in the text: it reaches remote callers; library/CLI callers get `fullOutputPath`.
    const notice = (omitted: number): string =>
      path !== undefined
        ? `[... ${omitted} chars omitted; full output kept by berth (fullOutputPath) ...]`
        : this.opts.spillDir === undefined
          ? `[... ${omitted} chars omitted ...]`
          : `[... ${omitted} chars omitted; full output could not be saved ...]`;
    const result: CaptureResult = {
      stdout: this.windows.stdout.text(notice),
      stderr: this.windows.stderr.text(notice),
      output: this.windows.output.text(notice),
      truncated: this.windows.output.truncated,
    };
    if (path !== undefined) result.fullOutputPath = path;
    return result;
  }

  private accept(stream: StreamName, bytes: Buffer, final: boolean): void {
    if (bytes.length > 0) this.spill(bytes);
    const text = this.decoders[stream].decode(bytes, { stream: !final });
    if (text.length === 0) return;
    this.windows[stream].push(text);
    this.windows.output.push(text);
    if (this.opts.onChunk !== undefined) {
      try {
        this.opts.onChunk(stream, text);
      } catch {
        // a failing consumer must not break the capture
      }
    }
  }

  private spill(bytes: Buffer): void {
    const dir = this.opts.spillDir;
    if (this.spillError !== undefined || dir === undefined) return;
    if (this.spillFd === undefined) {
      if (!this.windows.output.truncated) {
        // Copy: the caller's buffer may be reused.
        this.pending.push(Buffer.from(bytes));
        // The window is updated after this call, so check what it will be.
        if (this.windows.output.total + bytes.length <= this.opts.maxChars) return;
      }
      try {
        mkdirSync(dir, { recursive: true, mode: 0o700 });
        chmodSync(dir, 0o700);
        const name = `${this.opts.spillStem}-${Date.now()}-${randomBytes(4).toString('hex')}.out`;
        const path = join(dir, name);
        this.spillFd = openSync(path, 'wx', 0o600);
        this.spillPath = path;
        for (const b of this.pending) this.writeSpill(b);
        this.pending = [];
      } catch (err) {
        this.spillError = err;
        this.pending = [];
      }
      return;
    }
    try {
      this.writeSpill(bytes);
    } catch (err) {
      this.spillError = err;
    }
  }

  /** Appends to the open spill file up to its cap; what does not fit is only counted. */
  private writeSpill(bytes: Buffer): void {
    const room = Math.max(0, this.spillDataCap - this.spilled);
    const take = Math.min(room, bytes.length);
    if (take > 0) {
      writeAll(this.spillFd as number, take === bytes.length ? bytes : bytes.subarray(0, take));
      this.spilled += take;
    }
    this.spillDropped += bytes.length - take;
  }
}

function writeAll(fd: number, b: Buffer): void {
  let off = 0;
  while (off < b.length) off += writeSync(fd, b, off, b.length - off);
}
