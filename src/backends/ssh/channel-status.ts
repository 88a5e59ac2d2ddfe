import type { ClientChannel } from 'ssh2';
import { BackendUnavailableError } from '../../errors.js';
import type { SshConnection } from './connection.js';

/** What the host said of a process on a channel, or why it said nothing. */
export type ChannelStatus =
  | { code: number | null; signal: string | undefined; error?: undefined }
  | { code?: undefined; signal?: undefined; error: BackendUnavailableError };

/**
 * How the process on `channel` ended: its exit status or signal as soon as the host says it (the
 * channel may stay open while a child holds its output), else, once the channel closed without
 * either, the connection's word on why (`SshConnection.whyChannelEnded`): never a status of null
 * for an outcome nobody saw. `decided`: the caller has its own reason already (it closed the
 * channel: a timeout, too much output), so the connection is not asked and waited for. Never
 * rejects. Call it before the channel can close.
 */
export function channelStatus(channel: ClientChannel, connection: SshConnection, decided?: () => boolean): Promise<ChannelStatus> {
  return new Promise<ChannelStatus>((resolve) => {
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
