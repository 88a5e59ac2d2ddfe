/*
 * Reads a server-sent event stream from a fetch() response, as the dashboard does: events are
 * collected as they arrive, and a test waits for the first one that matches.
 */

export interface SseEvent {
  event: string;
  data: unknown;
}

export class SseReader {
  readonly events: SseEvent[] = [];
  private waiters: Array<() => void> = [];
  private ended = false;
  readonly done: Promise<void>;

  constructor(res: Response) {
    this.done = this.pump(res);
  }

  /** The first event (from `from` on) that `match` accepts; throws after `timeoutMs`. */
  async next(match: (e: SseEvent) => boolean, timeoutMs: number, from = 0): Promise<SseEvent> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const found = this.events.slice(from).find(match);
      if (found !== undefined) return found;
      if (this.ended) throw new Error(`the stream ended without a matching event (${this.events.length} events)`);
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`no matching event within ${timeoutMs} ms (${this.events.length} events)`);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, left);
        this.waiters.push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
  }

  private async pump(res: Response): Promise<void> {
    const reader = (res.body as ReadableStream<Uint8Array>).pipeThrough(new TextDecoderStream()).getReader();
    let buf = '';
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += value;
        for (let i = buf.indexOf('\n\n'); i >= 0; i = buf.indexOf('\n\n')) {
          const block = buf.slice(0, i);
          buf = buf.slice(i + 2);
          let event = 'message';
          let data = '';
          for (const line of block.split('\n')) {
            if (line.startsWith('event: ')) event = line.slice(7);
            else if (line.startsWith('data: ')) data += line.slice(6);
          }
          this.events.push({ event, data: JSON.parse(data) as unknown });
        }
        this.wake();
      }
    } catch {
      // Aborted by the test.
    } finally {
      this.ended = true;
      this.wake();
    }
  }

  private wake(): void {
    for (const w of this.waiters.splice(0)) w();
  }
}
