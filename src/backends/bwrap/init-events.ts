import type { Readable } from 'node:stream';

/** What the sandbox's init loop reports (see init-script.ts). */
export type InitEvent =
  | { kind: 'ready' }
  | { kind: 'started'; id: string; pid: number }
  | { kind: 'failed'; id: string; what: string };

/*
 * Anything in the sandbox can write to the init loop's event pipe, so a line is at most this long;
 * past it, bytes are dropped up to the next newline. Memory stays bounded whatever is written.
 */
const MAX_LINE = 128;

/** Parses one event line; undefined for anything else (ignored). Pure. */
export function parseInitEvent(line: string): InitEvent | undefined {
  if (line === 'R') return { kind: 'ready' };
  const m = /^([PE]) ([A-Za-z0-9_-]{1,64}) ([0-9]{1,10}|[a-z]{1,16})$/.exec(line);
  if (m === null) return undefined;
  const [, tag, id, value] = m as unknown as [string, 'P' | 'E', string, string];
  const n = Number(value);
  if (tag === 'P') return Number.isInteger(n) && n > 1 ? { kind: 'started', id, pid: n } : undefined;
  return /^[a-z]+$/.test(value) ? { kind: 'failed', id, what: value } : undefined;
}

/**
 * The exit status a wrapper wrote to a process's status FIFO; null when it wrote none (it was
 * killed) or wrote something else. Pure.
 */
export function parseExitStatus(text: string): number | null {
  const m = /^(\d{1,3})\n$/.exec(text);
  const n = m === null ? NaN : Number(m[1]);
  return Number.isInteger(n) && n <= 255 ? n : null;
}

/** Calls `onEvent` for each well-formed line of `stream`, with bounded buffering. */
export function readInitEvents(stream: Readable, onEvent: (e: InitEvent) => void): void {
  let line = '';
  let dropping = false;
  stream.setEncoding('latin1');
  stream.on('data', (chunk: string) => {
    let start = 0;
    for (;;) {
      const nl = chunk.indexOf('\n', start);
      const piece = chunk.slice(start, nl === -1 ? undefined : nl);
      if (!dropping) {
        line += piece;
        if (line.length > MAX_LINE) {
          line = '';
          dropping = true;
        }
      }
      if (nl === -1) return;
      if (!dropping) {
        const e = parseInitEvent(line);
        if (e !== undefined) onEvent(e);
      }
      line = '';
      dropping = false;
      start = nl + 1;
    }
  });
}
