import type { ServerResponse } from 'node:http';

/** Output chunk events queued for a slow client before further chunks are dropped (characters). */
const MAX_QUEUED_CHARS = 1024 * 1024;

/**
 * Server-sent events on a raw response that respect backpressure: an event is written only while
 * the socket takes it, and waits for `drain` otherwise. Output chunks come from a command that
 * cannot be paused, so while a slow client's queue holds more than `maxQueuedChars`, further
 * chunk events are dropped and counted, and a `stderr` event says how much was not streamed
 * before the next chunk (the final `result` event carries the output either way): a slow or
 * stalled client can hold no more than that much of the server's memory. Final events are never
 * dropped. A client that went away ends the writing; nothing more is queued for it.
 */
export class SseStream {
  private readonly queue: string[] = [];
  private queuedChars = 0;
  private droppedChars = 0;
  private pumping: Promise<void> | undefined;

  constructor(private readonly res: ServerResponse, private readonly maxQueuedChars = MAX_QUEUED_CHARS) {}

  /** The client went away (or the response is over): nothing is written any more. */
  get gone(): boolean {
    return this.res.destroyed || this.res.writableEnded;
  }

  /** Something written is still on its way: queued here, being written, or in a socket buffer that is full. */
  get congested(): boolean {
    return this.queue.length > 0 || this.pumping !== undefined || this.res.writableNeedDrain;
  }

  /** An output chunk: dropped (and counted) while the queue is over its bound. */
  chunk(event: 'stdout' | 'stderr', text: string): void {
    if (this.gone) return;
    if (this.queuedChars > this.maxQueuedChars) {
      this.droppedChars += text.length;
      return;
    }
    this.noteDropped();
    this.enqueue(format(event, text));
  }

  /** An event that is always sent (the result, an error). */
  send(event: string, data: unknown): void {
    if (this.gone) return;
    this.noteDropped();
    this.enqueue(format(event, data));
  }

  /** Writes what is queued, then ends the response. Resolves once done, or once the client went away. */
  async end(): Promise<void> {
    while (this.pumping !== undefined) await this.pumping;
    if (!this.gone) this.res.end();
  }

  private noteDropped(): void {
    if (this.droppedChars === 0) return;
    const notice = `[berth: ${this.droppedChars} characters of output were not streamed: the client read slower than the command wrote; the result event carries the output]\n`;
    this.droppedChars = 0;
    this.enqueue(format('stderr', notice));
  }

  private enqueue(text: string): void {
    this.queue.push(text);
    this.queuedChars += text.length;
    this.kick();
  }

  private kick(): void {
    if (this.pumping !== undefined) return;
    this.pumping = this.pump().finally(() => {
      this.pumping = undefined;
      // Queued after the loop saw an empty queue, before this ran.
      if (this.queue.length > 0) this.kick();
    });
  }

  private async pump(): Promise<void> {
    while (this.queue.length > 0) {
      if (this.gone) {
        this.queue.length = 0;
        this.queuedChars = 0;
        return;
      }
      const text = this.queue.shift() as string;
      this.queuedChars -= text.length;
      if (!this.res.write(text)) await drained(this.res);
    }
  }
}

function format(event: string, data: unknown): string {
  return `event: ${event}\ndata: ${JSON.stringify(data)}\n\n`;
}

/** Resolves on `drain`, or when the response closes (a client that went away never drains). */
function drained(res: ServerResponse): Promise<void> {
  return new Promise((resolve) => {
    const done = (): void => {
      res.off('drain', done);
      res.off('close', done);
      resolve();
    };
    res.once('drain', done);
    res.once('close', done);
  });
}
