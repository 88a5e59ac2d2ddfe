import type { IncomingMessage } from 'node:http';

export type BodyRead = { ok: true; text: string } | { ok: false; reason: 'too_large' | 'unreadable' };

/**
 * A request body as UTF-8 text, at most `maxBytes`. An oversized body is drained, not destroyed:
 * destroying the request would take the response's socket with it, and the caller still answers
 * 413 on it. A client that goes away mid-body is `unreadable`.
 */
export function readBody(req: IncomingMessage, maxBytes: number): Promise<BodyRead> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size <= maxBytes) chunks.push(chunk);
    });
    req.once('error', () => resolve({ ok: false, reason: 'unreadable' }));
    req.once('close', () => resolve({ ok: false, reason: 'unreadable' })); // a no-op once 'end' resolved
    req.once('end', () => {
      if (size > maxBytes) resolve({ ok: false, reason: 'too_large' });
      else resolve({ ok: true, text: chunks.length === 1 ? chunks[0]!.toString('utf8') : Buffer.concat(chunks).toString('utf8') });
    });
  });
}
