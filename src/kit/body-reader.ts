import type { IncomingMessage } from 'node:http';

/** A request body read whole, or why it was not: over the cap, or the client went away mid-body. */
export type BodyRead = { ok: true; bytes: Buffer } | { ok: false; reason: 'too_large' | 'unreadable' };

/**
 * Reads a request body of at most `maxBytes`. A declared length over the cap is refused before a
 * byte is read; a body that grows past it is refused once it ended. Either way what is left of it
 * is drained, not destroyed: destroying the request would take the response's socket with it,
 * and the caller still answers on it. A client that goes away mid-body is `unreadable`.
 *
 * @example
 * const body = await readBody(req, 1024 * 1024);
 * if (!body.ok) return answer(body.reason === 'too_large' ? 413 : 400);
 */
export function readBody(req: IncomingMessage, maxBytes: number): Promise<BodyRead> {
  const declared = req.headers['content-length'];
  if (declared !== undefined && Number(declared) > maxBytes) {
    req.resume();
    return Promise.resolve({ ok: false, reason: 'too_large' });
  }
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size <= maxBytes) chunks.push(chunk);
    });
    req.once('error', () => resolve({ ok: false, reason: 'unreadable' }));
    // A no-op once 'end' resolved.
    req.once('close', () => resolve({ ok: false, reason: 'unreadable' }));
    req.once('end', () => {
      if (size > maxBytes) resolve({ ok: false, reason: 'too_large' });
      else resolve({ ok: true, bytes: chunks.length === 1 ? chunks[0] as Buffer : Buffer.concat(chunks, size) });
    });
  });
}
