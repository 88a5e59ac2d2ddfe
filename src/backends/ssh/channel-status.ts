import type { ClientChannel } from 'ssh2';
import { BackendUnavailableError } from '../../errors.js';

/** What the host said of a process on a channel, or why it said nothing. */
export type ChannelStatus =
  | { code: number | null; signal: string | undefined; error?: undefined }
  | { code?: undefined; signal?: undefined; error: BackendUnavailableError };

type Said = { code: number | null; signal: string | undefined };

/** What a channel's status asks of its connection (`SshConnection`, which opens channels through `watchExit`). */
export interface ChannelConnection {
  whyChannelEnded(): Promise<BackendUnavailableError>;
}

/** Exit statuses said before anyone asked (see `watchExit`). */
const early = new WeakMap<ClientChannel, Said>();

/**
 * Keeps the exit status of `channel` from the moment it is opened. Call it in ssh2's exec callback,
 * before any `await`: ssh2 parses every packet of one read at once, so when a command ends at once
 * its exit status is emitted in the same tick as the exec's answer, before the code awaiting the
 * channel runs, and a listener attached there never hears it (the channel's close, which waits for
 * its output to be read, still comes).
 */
export function watchExit(channel: ClientChannel): void {
  channel.once('exit', (code: number | null, signal?: string) => early.set(channel, { code, signal: signal ?? undefined }));
}

/**
 * How the process on `channel` ended: its exit status or signal as soon as the host says it (the
 * channel may stay open while a child holds its output), else, once the channel closed without
 * either, the connection's word on why (`SshConnection.whyChannelEnded`): never a status of null
 * for an outcome nobody saw. `decided`: the caller has its own reason already (it closed the
 * channel: a timeout, too much output), so the connection is not asked and waited for. Never
 * rejects. Call it before the channel's output is read to its end; a status said earlier counts
 * when the channel came from `SshConnection.exec` (`watchExit`).
 */
export function channelStatus(channel: ClientChannel, connection: ChannelConnection, decided?: () => boolean): Promise<ChannelStatus> {
  return new Promise<ChannelStatus>((resolve) => {
    const before = early.get(channel);
    if (before !== undefined) {
      resolve(before);
      return;
    }
    let said = false;
    channel.once('exit', (code: number | null, signal?: string) => {
      said = true;
      resolve({ code, signal: signal ?? undefined });
    });
    channel.once('close', () => {
      if (said) return;
      if (decided?.() === true) resolve({ error: new BackendUnavailableError('the channel was closed by berth before an exit status came') });
      else void connection.whyChannelEnded().then((error) => resolve({ error }));
    });
  });
}
