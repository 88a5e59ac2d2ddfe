/**
 * Serialises async work per key: work under one key runs one at a time, in the order it came;
 * work under other keys runs alongside. A failure ends only its own turn. A key with nothing
 * queued holds no memory.
 *
 * @example
 * const locks = new KeyedLock();
 * await locks.run(`sandbox:${digest}`, () => createOnce()); // concurrent first calls create one
 */
export class KeyedLock {
  private readonly tails = new Map<string, Promise<unknown>>();

  run<T>(key: string, fn: () => Promise<T>): Promise<T> {
    const prev = this.tails.get(key) ?? Promise.resolve();
    const next = prev.then(fn, fn);
    const tail = next.catch(() => undefined);
    this.tails.set(key, tail);
    void tail.then(() => {
      if (this.tails.get(key) === tail) this.tails.delete(key);
    });
    return next;
  }

  /** Keys with work running or queued (for tests and leak checks). */
  get size(): number {
    return this.tails.size;
  }
}
