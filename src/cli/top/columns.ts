import { terminalText } from '../terminal-text.js';

/**
 * One column of a `berth top` table. `priority` 1 is kept longest: as the terminal narrows, the
 * columns drop from the highest number down, so what is left is always the most telling. A
 * `grow` column takes the room the kept columns leave, up to its `grow` width.
 */
export interface Column<R> {
  title: string;
  width: number;
  priority: number;
  right?: boolean;
  grow?: number;
  value: (row: R) => string;
}

/** A cell: made terminal-safe, cut to `width` (with `…`) and padded. */
function cell(text: string, width: number, right = false): string {
  const safe = terminalText(text);
  const cut = safe.length > width ? `${safe.slice(0, Math.max(0, width - 1))}…` : safe;
  return right ? cut.padStart(width) : cut.padEnd(width);
}

/**
 * The columns that fit `columns` characters (one space between two), in their display order:
 * the longest run of priorities 1, 2, 3, ... that fits, then the growing columns widened into the
 * room left. Priority 1 is always kept (cut to the terminal when even it does not fit).
 */
function fitColumns<R>(all: ReadonlyArray<Column<R>>, columns: number): Array<Column<R>> {
  const byPriority = [...all].sort((a, b) => a.priority - b.priority);
  const kept = new Set<Column<R>>();
  let used = -1;
  for (const c of byPriority) {
    if (kept.size > 0 && used + 1 + c.width > columns) break;
    kept.add(c);
    used += 1 + c.width;
  }
  let room = Math.max(0, columns - used);
  return all.filter((c) => kept.has(c)).map((c) => {
    if (c.grow === undefined || room === 0) return c;
    const extra = Math.min(room, Math.max(0, c.grow - c.width));
    room -= extra;
    return { ...c, width: c.width + extra };
  });
}

/** A table's header line and one line per row, with the columns that fit; no line is wider than `columns`. */
export function table<R>(all: ReadonlyArray<Column<R>>, rows: readonly R[], columns: number): string[] {
  const cols = fitColumns(all, columns);
  const line = (cells: string[]): string => cells.join(' ').trimEnd().slice(0, columns);
  return [
    line(cols.map((c) => cell(c.title, c.width, c.right))),
    ...rows.map((r) => line(cols.map((c) => cell(c.value(r), c.width, c.right)))),
  ];
}
