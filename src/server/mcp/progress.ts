import type { ServerNotification } from '@modelcontextprotocol/sdk/types.js';

/** What the terminal tool streams: its output as progress notifications, when the client asked (`_meta.progressToken`). */
export interface ProgressStream {
  /** Called with each chunk of output as the command writes it. */
  onChunk(stream: 'stdout' | 'stderr', chunk: string): void;
  /** Resolves once every notification was handed to the transport: the result goes after them. */
  flush(): Promise<void>;
}

/**
 * Output chunks as `notifications/progress` for the request that carried `progressToken`:
 * `progress` is the characters of output so far (it only grows, as the spec requires), `message`
 * the chunk itself, prefixed with `[stderr] ` when it came from stderr. Sent in order, one after
 * the other; a notification that cannot be sent (the client went away) is dropped, never an error
 * of the command.
 */
export function progressStream(progressToken: string | number, send: (n: ServerNotification) => Promise<void>): ProgressStream {
  let sent = Promise.resolve();
  let chars = 0;
  return {
    onChunk(stream, chunk) {
      if (chunk === '') return;
      chars += chunk.length;
      const progress = chars;
      const message = stream === 'stderr' ? `[stderr] ${chunk}` : chunk;
      sent = sent.then(() => send({ method: 'notifications/progress', params: { progressToken, progress, message } })).catch(() => undefined);
    },
    flush: () => sent,
  };
}
