import { terminalText } from './terminal-text.js';

/*
 * Progress of long CLI work (`berth image build`) on a terminal: one status line rewritten in
 * place with the current step, its number, the bytes fetched so far and the latest detail; a
 * finished step stays on screen as its own line. Not on a terminal, nothing is written: a log or
 * a pipe gets the one result line on stdout, and errors as always.
 */

/** Renders progress lines as they come; `done()` ends the status line. */
export interface ProgressRenderer {
  line(text: string): void;
  done(): void;
}

/** Where the progress goes: a terminal of this many columns, or none (quiet). */
export interface ProgressTarget {
  write: (text: string) => void;
  /** undefined: not a terminal. */
  columns: number | undefined;
}

/**
 * A detail of the current step rather than a step of its own: a tool's output line (`Get:1 ...`,
 * `Fetched ...`, `W: ...`, `I: ...` from apt and debootstrap), the engine's (`import: ...`) or a layer's
 * (`<12 hex>: Downloading`).
 */
const DETAIL = /^(?:[A-Z][A-Za-z]*:|Fetched |import: |[0-9a-f]{12}: )/;
/** apt's size of each package it gets: `Get:1 http://... bash-static amd64 5.2 [1079 kB]`. */
const FETCHED = /^Get:\d+ .*\[([\d,.]+) (B|kB|MB|GB)\]\s*$/;
const UNIT: Readonly<Record<string, number>> = { B: 1, kB: 1e3, MB: 1e6, GB: 1e9 };
const CLEAR_LINE = '\r\x1b[2K';

/** `2008000` → `2.0 MB`. */
export function formatBytes(bytes: number): string {
  if (bytes < 1e3) return `${bytes} B`;
  if (bytes < 1e6) return `${(bytes / 1e3).toFixed(1)} kB`;
  if (bytes < 1e9) return `${(bytes / 1e6).toFixed(1)} MB`;
  return `${(bytes / 1e9).toFixed(1)} GB`;
}

/** A renderer for `target`: in place on a terminal, silent otherwise. */
export function progressRenderer(target: ProgressTarget): ProgressRenderer {
  const { columns } = target;
  if (columns === undefined) return { line: () => undefined, done: () => undefined };
  const width = Math.max(20, columns - 1);
  let step = 0;
  let title = '';
  let bytes = 0;
  let open = false;
  const show = (detail: string | undefined): void => {
    const parts = [`[${step}] ${title}`];
    if (bytes > 0) parts.push(`${formatBytes(bytes)} fetched`);
    if (detail !== undefined) parts.push(detail);
    // A tool's line could carry escapes of its own: nothing but the status line's own may move the cursor.
    const text = terminalText(parts.join(' · '));
    target.write(`${CLEAR_LINE}${text.length > width ? `${text.slice(0, width - 1)}…` : text}`);
    open = true;
  };
  return {
    line(text) {
      const fetched = FETCHED.exec(text);
      if (fetched !== null) bytes += Math.round(Number((fetched[1] as string).replace(/,/g, '')) * (UNIT[fetched[2] as string] ?? 1));
      if (DETAIL.test(text) && step > 0) {
        show(text);
        return;
      }
      if (open) target.write('\n');
      step++;
      title = text;
      show(undefined);
    },
    done() {
      if (open) target.write('\n');
      open = false;
    },
  };
}
