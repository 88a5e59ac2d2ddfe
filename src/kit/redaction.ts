/*
 * Redaction of secret values from what leaves a sandbox: command output, file contents, a job's
 * output read from an offset, and text (cwd, audit entries). One engine, `redactRange`: every
 * occurrence of a value in a window of bytes (overlapping ones merged) becomes one marker. The
 * streaming redactor and the job reader both feed it windows that reach back before what they
 * emit, so a value that began in bytes already emitted is still found whole, and hold back an end
 * that may begin a value until more bytes (or the end) show whether it does.
 */

const REDACTED = '[REDACTED]';
/** Shorter values are not redacted (too likely to hit ordinary text). */
export const MIN_REDACT_LENGTH = 8;

const MARKER = Buffer.from(REDACTED);
const EMPTY = Buffer.alloc(0);

/** Values worth redacting, as bytes, each once, longest first. */
function needlesOf(values: readonly string[]): Buffer[] {
  const unique = [...new Set(values.filter((v) => v.length >= MIN_REDACT_LENGTH))];
  return unique.map((v) => Buffer.from(v, 'utf8')).sort((a, b) => b.length - a.length);
}

/** How far before (and after) a point a value around it may reach: the longest needle's length - 1. */
function reachOf(needles: readonly Buffer[]): number {
  return Math.max(0, (needles[0]?.length ?? 0) - 1);
}

/**
 * Replaces each value in text that is already a string (a cwd, an audit entry's command, a job
 * record). `values` as the grants give them: at least MIN_REDACT_LENGTH and longest first.
 */
export function redactText(text: string, values: readonly string[]): string {
  let out = text;
  for (const v of values) out = out.split(v).join(REDACTED);
  return out;
}

/** Length of the longest end of `data` that is a proper beginning of `needle` (0 if none). */
export function partialSuffix(data: Buffer, needle: Buffer): number {
  const first = needle[0];
  for (let k = Math.min(data.length, needle.length - 1); k > 0; k--) {
    const at = data.length - k;
    if (data[at] === first && data.compare(needle, 0, k, at, data.length) === 0) return k;
  }
  return 0;
}

/** Bytes at the end of `bytes` that could begin a needle, or (with `wholeChars`) are an incomplete UTF-8 character. */
function holdOf(bytes: Buffer, needles: readonly Buffer[], wholeChars: boolean): number {
  let hold = 0;
  // An incomplete UTF-8 sequence at the end: at most 3 bytes back to its lead byte.
  for (let back = 1; wholeChars && back <= Math.min(3, bytes.length); back++) {
    const b = bytes[bytes.length - back] as number;
    if ((b & 0xc0) === 0x80) continue; // continuation byte: keep looking for the lead
    const need = b >= 0xf0 ? 4 : b >= 0xe0 ? 3 : b >= 0xc0 ? 2 : 1;
    if (need > back) hold = back;
    break;
  }
  for (const n of needles) hold = Math.max(hold, partialSuffix(bytes, n));
  return hold;
}

/**
 * Bytes at the end of a chunk of text output that must wait for the next read: an incomplete
 * UTF-8 character, or the longest tail that is the start of a secret value (so redaction sees it whole).
 */
export function heldBack(bytes: Buffer, secrets: readonly string[]): number {
  return holdOf(bytes, needlesOf(secrets), true);
}

/**
 * Where needles occur in `data` (every occurrence, overlapping ones merged), in order; one that
 * began in `before` (bytes that came just ahead of `data`) and reaches into `data` starts at 0.
 */
function secretSpans(before: Buffer, data: Buffer, needles: readonly Buffer[]): Array<[number, number]> {
  const found: Array<[number, number]> = [];
  for (const n of needles) {
    for (let i = data.indexOf(n); i !== -1; i = data.indexOf(n, i + 1)) found.push([i, i + n.length]);
  }
  const reach = reachOf(needles);
  if (before.length > 0 && reach > 0) {
    // Only the seam is searched again: the end of `before` and the start of `data`, short bytes.
    const head = before.subarray(Math.max(0, before.length - reach));
    const seam = Buffer.concat([head, data.subarray(0, reach)]);
    for (const n of needles) {
      for (let i = seam.indexOf(n); i !== -1 && i < head.length; i = seam.indexOf(n, i + 1)) {
        if (i + n.length > head.length) found.push([0, i + n.length - head.length]);
      }
    }
  }
  if (found.length === 0) return found;
  found.sort((a, b) => a[0] - b[0] || b[1] - a[1]);
  const merged: Array<[number, number]> = [];
  for (const [s, t] of found) {
    const last = merged[merged.length - 1];
    if (last !== undefined && s < last[1]) last[1] = Math.max(last[1], t);
    else merged.push([s, t]);
  }
  return merged;
}

/** The last `n` bytes of `before` followed by `data` (a copy when they span both). */
function lastBytes(before: Buffer, data: Buffer, n: number): Buffer {
  if (data.length >= n) return data.subarray(data.length - n);
  return Buffer.concat([before.subarray(Math.max(0, before.length - (n - data.length))), data]);
}

interface RangeOptions {
  /** Most bytes of `data` to take (an occurrence may carry the end past it). */
  maxBytes: number;
  /** More bytes may follow `data`: an end that may begin a value (or a character) waits. */
  more: boolean;
  /** Never end inside a UTF-8 character (text handed out piece by piece). */
  wholeChars: boolean;
}

/**
 * The engine: up to `maxBytes` of `data` with every occurrence of a needle that reaches into
 * them replaced by one marker. `before` is what came just ahead of `data` (already handed out,
 * or read only to look back into): an occurrence that began there yields a marker, never its
 * tail. One across the end goes out whole as its marker (so small reads progress). `end` is the
 * index of `data` the output ends at (what follows starts there).
 */
function redactRange(before: Buffer, data: Buffer, needles: readonly Buffer[], o: RangeOptions): { out: Buffer; end: number } {
  if (o.maxBytes <= 0 || data.length === 0) return { out: EMPTY, end: 0 };
  const isCont = (i: number) => i < data.length && ((data[i] as number) & 0xc0) === 0x80;
  let end = Math.min(o.maxBytes, data.length);
  if (o.wholeChars && isCont(end)) {
    // Not inside a character: back to its start, or past its end when it alone exceeds maxBytes.
    let b = end;
    while (b > 0 && isCont(b)) b--;
    if (b > 0) end = b;
    else while (isCont(end)) end++;
  }
  if (o.more) end = Math.min(end, data.length - holdOf(lastBytes(before, data, Math.max(needles[0]?.length ?? 0, 4)), needles, o.wholeChars));
  const spans = secretSpans(before, data, needles);
  for (const [s, t] of spans) if (s < end && end < t) end = t;
  if (end <= 0) return { out: EMPTY, end: 0 };
  const parts: Buffer[] = [];
  let pos = 0;
  for (const [s, t] of spans) {
    if (t <= pos || s >= end) continue;
    if (s > pos) parts.push(data.subarray(pos, s));
    parts.push(MARKER);
    pos = t;
  }
  if (pos < end) parts.push(data.subarray(pos, end));
  return { out: parts.length === 1 ? parts[0] as Buffer : Buffer.concat(parts), end };
}

/**
 * Up to `maxBytes` of a job's output from `start` of `bytes`, a window read from before the
 * requested offset (`start` is where that offset sits; reach back `lookBackBytes(secrets)`) and
 * past its end, redacted (see `redactRange`) and never cut inside a character. `more`: output
 * may follow the window. `end` is the window index the text ends at (the next read's offset is
 * the window's offset + `end`).
 */
export function redactWindow(
  bytes: Buffer, start: number, maxBytes: number, secrets: readonly string[], more: boolean,
): { text: string; end: number } {
  if (start >= bytes.length) return { text: '', end: start };
  const { out, end } = redactRange(bytes.subarray(0, start), bytes.subarray(start), needlesOf(secrets), { maxBytes, more, wholeChars: true });
  return { text: out.toString('utf8'), end: start + end };
}

/** How far a window must reach back (and on) for a value around its edge to be found whole. */
export function lookBackBytes(secrets: readonly string[]): number {
  return reachOf(needlesOf(secrets));
}

/**
 * Replaces secret values in a byte stream. Works on bytes, before decoding, so binary output and
 * values split across chunk boundaries are both handled: an end of a chunk that could begin a
 * value is held back until more data (or the end) shows whether it does, and the last bytes let
 * out are kept to look back into, so values that overlap are redacted whole.
 *
 * @example
 * const r = new ByteRedactor(['s3cret-value']);
 * Buffer.concat([r.push(Buffer.from('a s3cr')), r.push(Buffer.from('et-value b')), r.flush()]).toString() // 'a [REDACTED] b'
 */
export class ByteRedactor {
  private readonly needles: Buffer[];
  /** The needles as text, for `redactString` (made on its first use). */
  private values: string[] | undefined;
  private readonly lookBack: number;
  /** The last bytes let out (raw), at most `lookBack`. */
  private seen: Buffer = EMPTY;
  /** Bytes held back: they may begin a value. */
  private carry: Buffer = EMPTY;

  constructor(values: readonly string[]) {
    this.needles = needlesOf(values);
    this.lookBack = reachOf(this.needles);
  }

  get active(): boolean {
    return this.needles.length > 0;
  }

  push(chunk: Buffer): Buffer {
    if (!this.active) return chunk;
    return this.take(chunk, true);
  }

  flush(): Buffer {
    if (!this.active || this.carry.length === 0) return EMPTY;
    return this.take(EMPTY, false);
  }

  /** Redact a whole string at once (cwd, messages). */
  redactString(s: string): string {
    this.values ??= this.needles.map((n) => n.toString('utf8'));
    return redactText(s, this.values);
  }

  private take(chunk: Buffer, more: boolean): Buffer {
    const data = this.carry.length === 0 ? chunk : Buffer.concat([this.carry, chunk]);
    const { out, end } = redactRange(this.seen, data, this.needles, { maxBytes: Number.POSITIVE_INFINITY, more, wholeChars: false });
    // Copies: the caller's buffer may be reused.
    this.seen = Buffer.from(lastBytes(this.seen, data.subarray(0, end), this.lookBack));
    this.carry = Buffer.from(data.subarray(end));
    return out;
  }
}
