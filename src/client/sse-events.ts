/** One server-sent event: its name and its data line(s) joined. */
export interface SseEvent {
  event: string;
  data: string;
}

/** The events of a `text/event-stream` body, as they arrive. */
export async function* sseEvents(body: ReadableStream<Uint8Array>): AsyncGenerator<SseEvent> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffered = '';
  try {
    for (;;) {
      const { done, value } = await reader.read();
      buffered += done ? decoder.decode() : decoder.decode(value, { stream: true });
      let end: number;
      while ((end = buffered.indexOf('\n\n')) !== -1) {
        const block = buffered.slice(0, end);
        buffered = buffered.slice(end + 2);
        const event = parseBlock(block);
        if (event !== undefined) yield event;
      }
      if (done) return;
    }
  } finally {
    // A reader that stops early lets the connection go rather than leave the rest unread.
    await reader.cancel().catch(() => undefined);
  }
}

function parseBlock(block: string): SseEvent | undefined {
  let event = 'message';
  const data: string[] = [];
  for (const line of block.split('\n')) {
    if (line.startsWith('event:')) event = line.slice(6).trim();
    else if (line.startsWith('data:')) data.push(line.slice(line.startsWith('data: ') ? 6 : 5));
  }
  return data.length === 0 ? undefined : { event, data: data.join('\n') };
}
