import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import ssh2 from 'ssh2';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { channelStatus } from '../../src/backends/ssh/channel-status.js';
import { SshConnection } from '../../src/backends/ssh/connection.js';
import { DEFAULT_POOL_SETTINGS, type SshTarget } from '../../src/backends/ssh/target.js';

const { Server, utils } = ssh2;

/**
 * ssh2's own server on loopback: it answers an exec with its success, the exit status, EOF and
 * close in one tick, so they reach berth in one read, as sshd's do when a command ends at once.
 * ssh2 emits the exit status while it parses that read, before the code awaiting `exec` runs.
 */
describe('an exit status in the same read as the exec\'s answer (ssh, ssh2 server on loopback)', () => {
  let dir: string;
  let server: InstanceType<typeof Server>;
  let target: SshTarget;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'berth-ssh-early-'));
    const host = utils.generateKeyPairSync('ed25519');
    const user = utils.generateKeyPairSync('ed25519');
    await writeFile(join(dir, 'id'), user.private, { mode: 0o600 });
    server = new Server({ hostKeys: [host.private] }, (client) => {
      client.on('authentication', (ctx) => ctx.accept());
      client.on('session', (accept) => {
        accept().on('exec', (acceptExec, _reject, info) => {
          const stream = acceptExec();
          stream.exit(Number(/\d+/.exec(info.command)?.[0] ?? 0));
          stream.end();
        });
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    target = {
      host: '127.0.0.1',
      port: (server.address() as AddressInfo).port,
      user: 'root',
      identityFile: join(dir, 'id'),
      knownHostsFile: join(dir, 'known_hosts'),
      trustOnFirstUse: true,
    };
  });

  afterAll(async () => {
    await new Promise<void>((resolve) => server.close(() => resolve()));
    await rm(dir, { recursive: true, force: true });
  });

  it('is still that status, every time', async () => {
    const conn = await SshConnection.open(1, target, DEFAULT_POOL_SETTINGS);
    try {
      for (let i = 0; i < 20; i++) {
        const channel = await conn.exec(`exit ${i + 1}`);
        const status = channelStatus(channel, conn);
        // As every caller does: read the output (the close waits for it).
        channel.resume();
        channel.stderr.resume();
        const said = await status;
        expect(said).toEqual({ code: i + 1, signal: undefined });
      }
    } finally {
      await conn.close();
    }
  });
});
