import { execFileSync } from 'node:child_process';
import { generateKeyPairSync } from 'node:crypto';
import { copyFileSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { expect, it } from 'vitest';
import { SshConnectionPool } from '../../src/backends/ssh/connections.js';
import { HostKeyError } from '../../src/backends/ssh/errors.js';
import { fingerprintOf, formatKnownHost, hostEntryName, parseKnownHosts } from '../../src/backends/ssh/known-hosts.js';
import type { SshTarget } from '../../src/backends/ssh/target.js';
import { BackendUnavailableError } from '../../src/errors.js';
import { describeSsh, sshTarget } from '../helpers/sshd.js';
import { tempDir } from '../helpers/temp-dir.js';

/** Runs `command` over a fresh pool and returns its stdout. */
async function run(target: SshTarget, command: string): Promise<string> {
  await using pool = new SshConnectionPool();
  const { channel } = await pool.exec(target, command);
  const chunks: Buffer[] = [];
  channel.on('data', (c: Buffer) => chunks.push(c));
  channel.stderr.resume();
  await new Promise((resolve) => channel.once('close', resolve));
  return Buffer.concat(chunks).toString();
}

function hostKeyOf(target: SshTarget): Buffer {
  const [entry] = parseKnownHosts(readFileSync(target.knownHostsFile, 'utf8'));
  if (entry === undefined) throw new Error(`no key in ${target.knownHostsFile}`);
  return entry.key;
}

function otherEd25519(): Buffer {
  const { publicKey } = generateKeyPairSync('ed25519');
  const raw = Buffer.from(publicKey.export({ format: 'jwk' }).x as string, 'base64url');
  const str = (b: Buffer): Buffer => Buffer.concat([Buffer.from([0, 0, 0, b.length]), b]);
  return Buffer.concat([str(Buffer.from('ssh-ed25519')), str(raw)]);
}

describeSsh('ssh host key verification against a real sshd', () => {
  it('connects when known_hosts holds the host key', async () => {
    expect(await run(sshTarget(), 'echo verified')).toBe('verified\n');
  });

  it('connects through a known_hosts file hashed by ssh-keygen -H', async () => {
    const dir = tempDir('berth-ssh-kh-');
    const file = join(dir, 'known_hosts');
    copyFileSync(sshTarget().knownHostsFile, file);
    execFileSync('ssh-keygen', ['-H', '-f', file], { stdio: 'ignore' });
    expect(readFileSync(file, 'utf8')).toMatch(/^\|1\|/);
    expect(await run(sshTarget({ knownHostsFile: file }), 'echo hashed')).toBe('hashed\n');
  });

  it('refuses an unknown host, naming the fingerprint ssh-keygen -lf prints and the line to add', async () => {
    const dir = tempDir('berth-ssh-kh-');
    const file = join(dir, 'known_hosts');
    writeFileSync(file, '');
    const target = sshTarget({ knownHostsFile: file });
    const err = await run(target, 'echo never').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(HostKeyError);
    expect((err as HostKeyError).reason).toBe('unknown');
    const key = hostKeyOf(sshTarget());
    const pub = join(dir, 'host.pub');
    writeFileSync(pub, `ssh-ed25519 ${key.toString('base64')}\n`);
    const printed = execFileSync('ssh-keygen', ['-lf', pub], { encoding: 'utf8' }).split(' ')[1] as string;
    expect((err as Error).message).toContain(printed);
    expect((err as Error).message).toContain(formatKnownHost(hostEntryName(target.host, target.port), key, { hashed: false }));
    expect(readFileSync(file, 'utf8')).toBe('');
  });

  it('refuses a changed host key, even with trust on first use on', async () => {
    const dir = tempDir('berth-ssh-kh-');
    const file = join(dir, 'known_hosts');
    const target = sshTarget({ knownHostsFile: file, trustOnFirstUse: true });
    const stale = otherEd25519();
    writeFileSync(file, `${formatKnownHost(hostEntryName(target.host, target.port), stale, { hashed: true })}\n`);
    const err = (await run(target, 'echo never').catch((e: unknown) => e)) as HostKeyError;
    expect((err as HostKeyError).reason).toBe('changed');
    expect(err.message).toContain(fingerprintOf(hostKeyOf(sshTarget())));
    expect(err.message).toContain(fingerprintOf(stale));
  });

  it('refuses a host whose key is @revoked', async () => {
    const dir = tempDir('berth-ssh-kh-');
    const file = join(dir, 'known_hosts');
    const good = readFileSync(sshTarget().knownHostsFile, 'utf8');
    writeFileSync(file, `${good}@revoked * ${good.trim().split(' ').slice(1).join(' ')}\n`);
    const err = (await run(sshTarget({ knownHostsFile: file }), 'echo never').catch((e: unknown) => e)) as HostKeyError;
    expect((err as HostKeyError).reason).toBe('revoked');
  });

  it('records the key on first use when asked to, and then trusts it without that option', async () => {
    const dir = tempDir('berth-ssh-kh-');
    const file = join(dir, 'known_hosts');
    expect(await run(sshTarget({ knownHostsFile: file, trustOnFirstUse: true }), 'echo first')).toBe('first\n');
    const text = readFileSync(file, 'utf8');
    expect(text).toMatch(/^\|1\|[^ ]+ ssh-ed25519 /);
    expect(parseKnownHosts(text)[0]?.key.equals(hostKeyOf(sshTarget()))).toBe(true);
    expect(await run(sshTarget({ knownHostsFile: file }), 'echo again')).toBe('again\n');
  });

  it('offers only the key types known for the host: an RSA-only entry cannot be met by an ed25519 host', async () => {
    const dir = tempDir('berth-ssh-kh-');
    const file = join(dir, 'known_hosts');
    const rsa = Buffer.concat([Buffer.from([0, 0, 0, 7]), Buffer.from('ssh-rsa'), Buffer.from([0, 0, 0, 3, 1, 0, 1, 0, 0, 0, 2, 1, 1])]);
    const target = sshTarget({ knownHostsFile: file });
    writeFileSync(file, `${formatKnownHost(hostEntryName(target.host, target.port), rsa, { hashed: false })}\n`);
    const err = await run(target, 'echo never').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(BackendUnavailableError);
    expect((err as Error).message).toContain(`${target.host}:${target.port}`);
    expect((err as Error).message).toContain('none of the host key types that known_hosts holds for it');
  });
});
