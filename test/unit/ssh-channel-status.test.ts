import { EventEmitter } from 'node:events';
import type { ClientChannel } from 'ssh2';
import { describe, expect, it } from 'vitest';
import { channelStatus } from '../../src/backends/ssh/channel-status.js';
import type { SshConnection } from '../../src/backends/ssh/connection.js';
import { BackendUnavailableError } from '../../src/errors.js';

/** A channel's events alone, and a connection that counts how often it was asked why. */
function parts(decided?: () => boolean) {
  const channel = new EventEmitter();
  let asked = 0;
  const why = new BackendUnavailableError('the host ended a channel without an exit status');
  const connection = { whyChannelEnded: () => (asked++, Promise.resolve(why)) };
  return { channel, why, asked: () => asked, status: channelStatus(channel as unknown as ClientChannel, connection as unknown as SshConnection, decided) };
}

describe('a channel\'s status (ssh)', () => {
  it('is the exit status as soon as the host says it, before the channel closes, and never asks the connection', async () => {
    const p = parts();
    p.channel.emit('exit', 3);
    expect(await p.status).toEqual({ code: 3, signal: undefined });
    p.channel.emit('close');
    expect(p.asked()).toBe(0);
  });

  it('is the signal that ended the process', async () => {
    const p = parts();
    p.channel.emit('exit', null, 'KILL');
    expect(await p.status).toEqual({ code: null, signal: 'KILL' });
  });

  it('is the connection\'s reason when the channel closed without a status, never a status of null', async () => {
    const p = parts();
    p.channel.emit('close');
    const said = await p.status;
    expect(said.error).toBe(p.why);
    expect(said.code).toBeUndefined();
    expect(p.asked()).toBe(1);
  });

  it('does not ask the connection (nor wait for its word) when the caller closed the channel for a reason of its own', async () => {
    let failed = false;
    const p = parts(() => failed);
    failed = true;
    p.channel.emit('close');
    const said = await p.status;
    expect(said.error?.message).toContain('closed by berth');
    expect(p.asked()).toBe(0);
  });
});
