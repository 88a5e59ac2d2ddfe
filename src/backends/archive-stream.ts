import { PassThrough, type Readable } from 'node:stream';

/**
 * The archive as a stream: data flows as it comes; the stream ends only after the producer
 * exited 0, and errors otherwise. Destroying it stops the producer.
 */
export function guardedStream(
  producer: { destroy(): void },
  wire: (stdout: PassThrough, stderr: PassThrough) => void,
  exited: () => Promise<number | null>,
  failure: (code: number | null, stderr: string) => Error,
): Readable {
  const out = new PassThrough();
  const stdout = new PassThrough();
  const stderr = new PassThrough();
  const errText: Buffer[] = [];
  stderr.on('data', (b: Buffer) => errText.push(b));
  stdout.on('data', (b: Buffer) => {
    if (!out.write(b)) {
      stdout.pause();
      out.once('drain', () => stdout.resume());
    }
  });
  const ended = Promise.all([
    new Promise((r) => stdout.once('end', r)),
    new Promise((r) => stderr.once('end', r)),
  ]);
  void ended.then(async () => {
    if (out.destroyed) return;
    const code = await exited();
    if (code === 0) out.end();
    else out.destroy(failure(code, Buffer.concat(errText).toString('utf8')));
  });
  out.once('close', () => producer.destroy());
  wire(stdout, stderr);
  return out;
}
