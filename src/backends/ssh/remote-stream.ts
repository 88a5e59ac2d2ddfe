import { PassThrough, type Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { BerthError, TimeoutError } from '../../errors.js';
import { channelStatus } from './channel-status.js';
import type { SshConnectionPool } from './connections.js';
import { endpointOf } from './errors.js';
import { scriptCommand } from './remote-exec.js';
import type { SshTarget } from './target.js';

/** How one of berth's root helpers with a stream ended. */
export interface StreamedExit {
  code: number | null;
  signal: string | undefined;
  /** Its stderr, bounded (the end of it is what tells why). */
  stderr: string;
}

export interface RemoteStream {
  /** Its stdout, as it comes (an archive): never held whole in memory. */
  stdout: Readable;
  /** Resolves once the channel closed; rejects when the connection was lost or the time ran out. */
  exited: Promise<StreamedExit>;
  /** Closes the channel (its reader gave up): `exited` then settles. */
  cancel(): void;
}

/** stderr kept for the message: the end of it. */
const STDERR_KEEP_BYTES = 64 * 1024;

/**
 * Runs one of berth's root scripts on the host with a stream: `stdin` (when given) flows into it
 * and its stdout flows out, both with backpressure over the ssh channel. A source that fails
 * closes the channel without an end-of-file, so the script never takes a cut archive for a whole one.
 */
export async function remoteStream(
  pool: SshConnectionPool, target: SshTarget, script: string, args: readonly string[], opts: { stdin?: Readable; timeoutMs: number },
): Promise<RemoteStream> {
  const where = endpointOf(target.host, target.port);
  const { channel, connection } = await pool.exec(target, scriptCommand(script, 'berth-admin', args));
  const stdout = new PassThrough();
  let failure: BerthError | undefined;
  const err: Buffer[] = [];
  let errBytes = 0;
  channel.stderr.on('data', (c: Buffer) => {
    if (errBytes < STDERR_KEEP_BYTES) {
      err.push(c);
      errBytes += c.length;
    }
  });
  const status = channelStatus(channel, connection, () => failure !== undefined);
  channel.on('error', (e: Error) => {
    failure ??= new BerthError('transfer_failed', `the channel to ${where} failed: ${e.message}`, { cause: e });
  });
  channel.pipe(stdout);
  // A reader that stopped early (tar at its end marker) leaves the rest unread: it is read and
  // dropped, or the remote side would wait to send it and the channel never close.
  stdout.once('close', () => {
    channel.unpipe(stdout);
    channel.resume();
  });
  const timer = setTimeout(() => {
    failure ??= new TimeoutError(`berth's snapshot helper on ${where} did not finish within ${opts.timeoutMs} ms`);
    channel.close();
  }, opts.timeoutMs);
  if (opts.stdin === undefined) {
    channel.end();
  } else {
    pipeline(opts.stdin, channel).catch((e: unknown) => {
      failure ??= e instanceof BerthError ? e : new BerthError('transfer_failed', `the archive for ${where} could not be read: ${(e as Error).message}`, { cause: e });
      channel.close();
    });
  }
  const exited = new Promise<StreamedExit>((resolve, reject) => {
    channel.once('close', () => {
      clearTimeout(timer);
      const fail = (why: BerthError): void => {
        stdout.destroy(why);
        reject(why);
      };
      // berth's own reason (time, a failed source) first: no wait for the connection's word.
      if (failure !== undefined) return fail(failure);
      void status.then((said) => {
        if (said.error !== undefined) fail(said.error);
        else resolve({ code: said.code, signal: said.signal, stderr: Buffer.concat(err).toString('utf8') });
      });
    });
  });
  exited.catch(() => undefined);
  return { stdout, exited, cancel: () => channel.close() };
}

/** Why a helper failed: its `E` line, else the end of its stderr, else its exit. */
export function helperFailure(x: StreamedExit): string {
  const lines = x.stderr.trim().split('\n');
  const refusal = lines.find((l) => l.startsWith('E '));
  if (refusal !== undefined) return refusal.slice(2);
  return lines.slice(-3).join('; ') || (x.signal !== undefined ? `signal ${x.signal}` : `exit ${String(x.code)}`);
}
