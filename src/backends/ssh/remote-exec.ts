import { BerthError, TimeoutError } from '../../errors.js';
import { shQuote } from '../../shell/protocol.js';
import { channelStatus } from './channel-status.js';
import type { SshConnectionPool } from './connections.js';
import { endpointOf } from './errors.js';
import type { SshTarget } from './target.js';

export interface RemoteResult {
  code: number | null;
  /** Set when the process was ended by a signal. */
  signal: string | undefined;
  stdout: string;
  stderr: string;
}

export interface RemoteRunOptions {
  timeoutMs?: number;
  /** Bound on stdout + stderr; past it the channel is closed and the run rejects. */
  maxOutputBytes?: number;
}

/**
 * Runs one of berth's own bash scripts as the login user (root) on the host. The scripts are
 * fixed text and their arguments are names, numbers and tags: nothing secret, since the host's
 * `ps` shows both.
 */
export type RemoteRunner = (script: string, args: readonly string[], opts?: RemoteRunOptions) => Promise<RemoteResult>;

const DEFAULT_TIMEOUT_MS = 60_000;
const DEFAULT_MAX_OUTPUT_BYTES = 1024 * 1024;

/** The exec request line for `script`: bash without rc files, the script and its arguments quoted. */
export function scriptCommand(script: string, name: string, args: readonly string[]): string {
  return ['exec', '/bin/bash', '--noprofile', '--norc', '-c', shQuote(script), name, ...args.map(shQuote)].join(' ');
}

/** A `RemoteRunner` over the pool's channels to `target`. */
export function remoteRunner(pool: SshConnectionPool, target: SshTarget): RemoteRunner {
  return async (script, args, opts = {}) => {
    const timeoutMs = opts.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    const cap = opts.maxOutputBytes ?? DEFAULT_MAX_OUTPUT_BYTES;
    const where = endpointOf(target.host, target.port);
    const { channel, connection } = await pool.exec(target, scriptCommand(script, 'berth-admin', args));
    return new Promise<RemoteResult>((resolve, reject) => {
      const out: Buffer[] = [];
      const err: Buffer[] = [];
      let bytes = 0;
      let failure: BerthError | undefined;
      const status = channelStatus(channel, connection, () => failure !== undefined);
      channel.end();
      const take = (into: Buffer[]) => (c: Buffer): void => {
        bytes += c.length;
        if (bytes > cap) {
          failure ??= new BerthError('helper_output_too_large', `berth's helper on ${where} printed more than ${cap} bytes; it was stopped`);
          channel.close();
          return;
        }
        into.push(c);
      };
      channel.on('data', take(out));
      channel.stderr.on('data', take(err));
      const timer = setTimeout(() => {
        failure ??= new TimeoutError(`berth's helper on ${where} did not finish within ${timeoutMs} ms`);
        channel.close();
      }, timeoutMs);
      channel.once('close', () => {
        clearTimeout(timer);
        // berth's own reason (time, size) first: no wait for the connection's word.
        if (failure !== undefined) return reject(failure);
        void status.then(({ code, signal, error }) => {
          if (error !== undefined) reject(error);
          else resolve({ code, signal, stdout: Buffer.concat(out).toString('utf8'), stderr: Buffer.concat(err).toString('utf8') });
        });
      });
    });
  };
}
