/*
 * Folds a sandbox's repeated refusals of one kind into one record an interval. A wrong proxy
 * token is refused before anything proves who sent it: anyone who knows a sandbox's proxy user
 * could otherwise add rows to its egress audit at will, with a host of their choosing.
 */

/** What `take` answers when a refusal is to be recorded: how many were folded since the last one recorded. */
export interface Unfolded {
  folded: number;
}

export class RefusalFold {
  private readonly last = new Map<string, { atMs: number; folded: number }>();

  /**
   * @param intervalMs at most one record per key this often.
   * @param now the clock (ms since the epoch).
   */
  constructor(private readonly intervalMs: number, private readonly now: () => number = Date.now) {}

  /** A refusal of `key`: record it (with the count folded since the last record), or undefined: it is folded. */
  take(key: string): Unfolded | undefined {
    const now = this.now();
    const seen = this.last.get(key);
    if (seen !== undefined && now - seen.atMs < this.intervalMs) {
      seen.folded++;
      return undefined;
    }
    this.last.set(key, { atMs: now, folded: 0 });
    return { folded: seen?.folded ?? 0 };
  }

  /** Forgets `key` (it is going); how many of its refusals were folded since its last record. */
  drain(key: string): number {
    const folded = this.last.get(key)?.folded ?? 0;
    this.last.delete(key);
    return folded;
  }
}
