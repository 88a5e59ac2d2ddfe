import { execFile } from 'node:child_process';
import { Transform, type TransformCallback } from 'node:stream';
import { BerthError } from '../../errors.js';
import type { SnapshotBudget } from '../backend.js';

/*
 * What a snapshot may take, checked before anything is copied. Sizes are apparent sizes (a
 * sparse file counts in full: `docker commit` and a tar archive write its holes out as zeros),
 * measured without following links, with the sandbox frozen (paused, or its processes ended) so
 * what was measured is what is copied.
 */

/** How long measuring one tree may take; past it the snapshot is refused (fail closed). */
const MEASURE_TIMEOUT_MS = 60_000;

/** Apparent bytes of the tree `dir` (`du --apparent-size`, links not followed, hard links once). */
export function apparentBytes(dir: string, timeoutMs: number = MEASURE_TIMEOUT_MS): Promise<number> {
  return duFigure(dir, ['-B1', '--apparent-size', '-x'], timeoutMs).catch((err: Error) => {
    throw new BerthError('transfer_failed', `could not measure ${dir} before the snapshot (du: ${err.message}); nothing was copied`, { cause: err });
  });
}

/**
 * The figure `du -s -P <flags>` prints for the tree `dir` (links not followed, hard links once);
 * rejects with du's reason: its last line on stderr, or that it did not finish within `timeoutMs`.
 */
export async function duFigure(dir: string, flags: readonly string[], timeoutMs: number): Promise<number> {
  return (await duFigures([dir], flags, timeoutMs))[0] ?? 0;
}

/** `duFigure` of each of `dirs` (trees apart from each other), by one `du`. */
export function duFigures(dirs: readonly string[], flags: readonly string[], timeoutMs: number): Promise<number[]> {
  if (dirs.length === 0) return Promise.resolve([]);
  return new Promise((resolve, reject) => {
    execFile('du', ['-s', ...flags, '-P', '--', ...dirs], { timeout: timeoutMs, maxBuffer: 1 << 16 }, (err, out, stderr) => {
      if (err === null) {
        const lines = out.split('\n').filter((l) => l !== '');
        resolve(dirs.map((_, i) => Number(lines[i]?.split(/\s/)[0]) || 0));
      } else {
        const why = err.killed ? `it did not finish within ${timeoutMs / 1000} s` : stderr.trim().split('\n').at(-1) || err.message;
        reject(Object.assign(new Error(why), { cause: err }));
      }
    });
  });
}

/** The part of a budget one snapshot has spent; `spend` refuses it (`tenant_limit`) before a part past the rest is copied. */
export class BudgetSpender {
  private spent = 0;

  constructor(private readonly id: string, private readonly budget: SnapshotBudget) {}

  /** Bytes still free. */
  left(): number {
    return Math.max(0, this.budget.maxBytes - this.spent);
  }

  /** Counts `bytes` of `what` (as the sandbox names it), or refuses the snapshot when they do not fit. */
  spend(what: string, bytes: number): void {
    if (this.spent + bytes > this.budget.maxBytes || this.budget.claim?.(this.spent + bytes) === false) throw this.tooLarge(what, bytes);
    this.spent += bytes;
  }

  /** The refusal: names the part, its size, the limit and the fixes. */
  tooLarge(what: string, bytes: number | undefined): BerthError {
    const size = bytes === undefined ? `more than ${this.left()} bytes` : `${bytes} bytes`;
    return new BerthError('tenant_limit', `snapshot ${this.id} refused before copying: ${what} holds ${size} ` +
      `(apparent size: sparse files count in full)${this.spent > 0 ? ` after ${this.spent} bytes of other parts` : ''}, ` +
      `past what it may take (${this.budget.limit}); remove files from the sandbox or snapshots (berth snapshot rm NAME), or raise limits.snapshotBytes`);
  }

  /** A pass-through that fails with the refusal once more than what is left flowed through it (a stream whose size is not known first). */
  cap(what: string): Transform {
    let bytes = 0;
    const max = this.left();
    // Its size is known only once it flowed: all that is left is claimed meanwhile.
    if (this.budget.claim?.(this.spent + max) === false) throw this.tooLarge(what, undefined);
    return new Transform({
      transform: (chunk: Buffer, _enc: BufferEncoding, done: TransformCallback) => {
        bytes += chunk.length;
        if (bytes > max) done(this.tooLarge(what, undefined));
        else done(null, chunk);
      },
    });
  }
}
