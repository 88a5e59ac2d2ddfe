import { execFileSync, spawnSync } from 'node:child_process';
import { generateKeyPairSync } from 'node:crypto';
import { readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { HostKeyError } from '../../src/backends/ssh/errors.js';
import { HostKeyCheck } from '../../src/backends/ssh/host-key-check.js';
import {
  fingerprintOf,
  formatKnownHost,
  hostEntryName,
  hostKeyAlgorithmsFor,
  judgeHostKey,
  matchesHost,
  parseKnownHosts,
} from '../../src/backends/ssh/known-hosts.js';
import { tempDir } from '../helpers/temp-dir.js';

/** An SSH ed25519 public key blob: string "ssh-ed25519", string <32-byte key>. */
function ed25519Blob(): Buffer {
  const { publicKey } = generateKeyPairSync('ed25519');
  const raw = Buffer.from(publicKey.export({ format: 'jwk' }).x as string, 'base64url');
  return sshString(Buffer.from('ssh-ed25519'), raw);
}

function sshString(...parts: Buffer[]): Buffer {
  return Buffer.concat(parts.flatMap((p) => {
    const len = Buffer.alloc(4);
    len.writeUInt32BE(p.length);
    return [len, p];
  }));
}

/** An ssh-rsa blob shape (type + exponent + modulus); only its type matters here. */
function rsaLikeBlob(): Buffer {
  return sshString(Buffer.from('ssh-rsa'), Buffer.from([1, 0, 1]), Buffer.alloc(64, 7));
}

function line(name: string, blob: Buffer): string {
  return formatKnownHost(name, blob, { hashed: false });
}

const sshKeygen = spawnSync('ssh-keygen', ['-?'], { stdio: 'ignore' }).error === undefined;
const withSshKeygen = sshKeygen ? it : it.skip;
if (!sshKeygen) console.warn('skipping the ssh-keygen cross-checks: ssh-keygen is not installed (apt-get install openssh-client)');

describe('known_hosts parsing and matching', () => {
  it('writes hosts off port 22 as [host]:port, lowercased', () => {
    expect(hostEntryName('Build1.Example', 22)).toBe('build1.example');
    expect(hostEntryName('127.0.0.1', 2222)).toBe('[127.0.0.1]:2222');
  });

  it('matches comma lists, wildcards and negations, and skips comments and malformed lines', () => {
    const k = ed25519Blob();
    const b64 = k.toString('base64');
    const entries = parseKnownHosts([
      '# a comment',
      '',
      `build1,build2.example ssh-ed25519 ${b64}`,
      `*.lab,!secret.lab ssh-ed25519 ${b64} a comment`,
      `[10.0.0.?]:2222 ssh-ed25519 ${b64}`,
      'garbage-without-key',
      `host ssh-rsa ${b64}`, // type field disagrees with the blob: corrupt
      `@unknown-marker host ssh-ed25519 ${b64}`,
      `host ssh-ed25519 not*base64`,
    ].join('\n'));
    expect(entries.map((e) => e.line)).toEqual([3, 4, 5]);
    const [list, glob, port] = entries;
    expect(matchesHost(list!.hosts, 'build2.example')).toBe(true);
    expect(matchesHost(list!.hosts, 'build3.example')).toBe(false);
    expect(matchesHost(glob!.hosts, 'a.lab')).toBe(true);
    expect(matchesHost(glob!.hosts, 'secret.lab')).toBe(false);
    expect(matchesHost(port!.hosts, '[10.0.0.7]:2222')).toBe(true);
    expect(matchesHost(port!.hosts, '10.0.0.7')).toBe(false);
    expect(matchesHost(port!.hosts, '[10.0.0.17]:2222')).toBe(false);
  });

  it('reads @revoked and @cert-authority markers', () => {
    const k = ed25519Blob();
    const entries = parseKnownHosts(`@revoked * ${line('x', k).split(' ').slice(1).join(' ')}\n@cert-authority *.lab ${line('x', k).split(' ').slice(1).join(' ')}\n`);
    expect(entries.map((e) => e.marker)).toEqual(['revoked', 'cert-authority']);
  });

  it('matches a hashed line it wrote, and only for that name', () => {
    const k = ed25519Blob();
    const [e] = parseKnownHosts(formatKnownHost('[127.0.0.1]:2222', k, { hashed: true }));
    expect(e!.hosts.kind).toBe('hashed');
    expect(matchesHost(e!.hosts, '[127.0.0.1]:2222')).toBe(true);
    expect(matchesHost(e!.hosts, '127.0.0.1')).toBe(false);
    expect(matchesHost(e!.hosts, '[127.0.0.1]:2223')).toBe(false);
  });

  withSshKeygen('matches lines hashed by ssh-keygen -H, and ssh-keygen -F finds the hashed lines berth writes', () => {
    const dir = tempDir('berth-kh-');
    const k = ed25519Blob();
    const file = join(dir, 'known_hosts');
    writeFileSync(file, `${line('[build.example]:2200', k)}\n${line('other.example', ed25519Blob())}\n`);
    execFileSync('ssh-keygen', ['-H', '-f', file], { stdio: 'ignore' });
    const entries = parseKnownHosts(readFileSync(file, 'utf8'));
    expect(entries.every((e) => e.hosts.kind === 'hashed')).toBe(true);
    expect(judgeHostKey(entries, '[build.example]:2200', k).kind).toBe('trusted');
    expect(judgeHostKey(entries, 'build.example', k).kind).toBe('unknown');

    const ours = join(dir, 'ours');
    writeFileSync(ours, `${formatKnownHost('[10.1.2.3]:2022', k, { hashed: true })}\n`);
    const found = execFileSync('ssh-keygen', ['-F', '[10.1.2.3]:2022', '-f', ours], { encoding: 'utf8' });
    expect(found).toContain(k.toString('base64'));
  });

  withSshKeygen('prints the SHA256 fingerprint exactly as ssh-keygen -lf does', () => {
    const dir = tempDir('berth-kh-');
    const k = ed25519Blob();
    const file = join(dir, 'key.pub');
    writeFileSync(file, `ssh-ed25519 ${k.toString('base64')} test\n`);
    const printed = execFileSync('ssh-keygen', ['-lf', file], { encoding: 'utf8' });
    expect(printed.split(' ')[1]).toBe(fingerprintOf(k));
  });
});

describe('judging a presented host key', () => {
  const name = '[127.0.0.1]:2222';

  it('trusts the listed key, reports another key of the same type as changed, and a new type as unknown', () => {
    const good = ed25519Blob();
    const entries = parseKnownHosts(`${line(name, good)}\n`);
    expect(judgeHostKey(entries, name, good).kind).toBe('trusted');
    const changed = judgeHostKey(entries, name, ed25519Blob());
    expect(changed.kind).toBe('changed');
    expect(judgeHostKey(entries, name, rsaLikeBlob()).kind).toBe('unknown');
    expect(judgeHostKey(entries, '[127.0.0.1]:2223', good).kind).toBe('unknown');
  });

  it('refuses a key listed @revoked whatever host pattern the revocation carries, even next to a trusting line', () => {
    const k = ed25519Blob();
    const entries = parseKnownHosts(`${line(name, k)}\n@revoked some-other-host ${line('x', k).split(' ').slice(1).join(' ')}\n`);
    const v = judgeHostKey(entries, name, k);
    expect(v.kind).toBe('revoked');
  });

  it('does not let a @cert-authority line vouch for a plain key', () => {
    const ca = ed25519Blob();
    const hostKey = ed25519Blob();
    const entries = parseKnownHosts(`@cert-authority [127.0.0.1]:* ${line('x', ca).split(' ').slice(1).join(' ')}\n`);
    expect(judgeHostKey(entries, name, hostKey).kind).toBe('cert-authority-only');
    expect(judgeHostKey(entries, name, ca).kind).toBe('cert-authority-only');
  });

  it('offers only the algorithms of key types trusted for the host, RSA as its SHA-2 signatures first', () => {
    const entries = parseKnownHosts([
      line(name, rsaLikeBlob()),
      line(name, ed25519Blob()),
      line('elsewhere', ed25519Blob()),
      `@revoked ${name} ${line('x', ed25519Blob()).split(' ').slice(1).join(' ')}`,
    ].join('\n'));
    expect(hostKeyAlgorithmsFor(entries, name)).toEqual(['rsa-sha2-512', 'rsa-sha2-256', 'ssh-rsa', 'ssh-ed25519']);
    expect(hostKeyAlgorithmsFor(entries, 'unknown-host')).toEqual([]);
  });
});

describe('HostKeyCheck against a known_hosts file', () => {
  it('refuses an unknown host with the fingerprint and the exact line to add', async () => {
    const dir = tempDir('berth-kh-');
    const file = join(dir, 'known_hosts');
    const k = ed25519Blob();
    const check = await HostKeyCheck.load({ host: '127.0.0.1', port: 2222, knownHostsFile: file, trustOnFirstUse: false });
    const err = await check.verify(k).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(HostKeyError);
    expect((err as HostKeyError).reason).toBe('unknown');
    const msg = (err as Error).message;
    expect(msg).toContain(fingerprintOf(k));
    expect(msg).toContain('(the file does not exist)');
    expect(msg).toContain(`\n[127.0.0.1]:2222 ssh-ed25519 ${k.toString('base64')}\n`);
    expect(msg).toContain('ssh-keyscan -p 2222 -t ssh-ed25519 127.0.0.1');
  });

  it('names both fingerprints and how to replace the entry when the key changed, even with trust on first use', async () => {
    const dir = tempDir('berth-kh-');
    const file = join(dir, 'known_hosts');
    const old = ed25519Blob();
    const now = ed25519Blob();
    writeFileSync(file, `# hosts\n${line('build1', old)}\n`);
    const check = await HostKeyCheck.load({ host: 'build1', port: 22, knownHostsFile: file, trustOnFirstUse: true });
    const err = (await check.verify(now).catch((e: unknown) => e)) as HostKeyError;
    expect((err as HostKeyError).reason).toBe('changed');
    expect(err.message).toContain(fingerprintOf(now));
    expect(err.message).toContain(`line 2 (${fingerprintOf(old)})`);
    expect(err.message).toContain(`ssh-keygen -R 'build1' -f ${file}`);
    expect(readFileSync(file, 'utf8')).toBe(`# hosts\n${line('build1', old)}\n`);
  });

  it('records an unknown key as a hashed line on first use (0600, on a line of its own) and trusts it afterwards', async () => {
    const dir = tempDir('berth-kh-');
    const file = join(dir, 'known_hosts');
    const k = ed25519Blob();
    const opts = { host: '127.0.0.1', port: 2222, knownHostsFile: file, trustOnFirstUse: true };
    await (await HostKeyCheck.load(opts)).verify(k);
    expect(statSync(file).mode & 0o777).toBe(0o600);
    const text = readFileSync(file, 'utf8');
    expect(text).toMatch(/^\|1\|[^ ]+ ssh-ed25519 [^ ]+\n$/);
    expect(text).not.toContain('127.0.0.1');
    const strict = await HostKeyCheck.load({ ...opts, trustOnFirstUse: false });
    await expect(strict.verify(k)).resolves.toBeUndefined();

    const other = join(dir, 'unterminated');
    writeFileSync(other, line('somewhere', ed25519Blob()));
    await (await HostKeyCheck.load({ ...opts, knownHostsFile: other })).verify(k);
    expect(readFileSync(other, 'utf8').split('\n').filter((l) => l !== '')).toHaveLength(2);
  });

  it('refuses a revoked key and explains a @cert-authority-only entry', async () => {
    const dir = tempDir('berth-kh-');
    const file = join(dir, 'known_hosts');
    const k = ed25519Blob();
    writeFileSync(file, `@revoked * ${line('x', k).split(' ').slice(1).join(' ')}\n@cert-authority build2 ${line('x', ed25519Blob()).split(' ').slice(1).join(' ')}\n`);
    const revoked = (await (await HostKeyCheck.load({ host: 'build1', port: 22, knownHostsFile: file, trustOnFirstUse: true })).verify(k).catch((e: unknown) => e)) as HostKeyError;
    expect((revoked as HostKeyError).reason).toBe('revoked');
    expect(revoked.message).toContain(`${file} line 1 marks @revoked`);
    const ca = (await (await HostKeyCheck.load({ host: 'build2', port: 22, knownHostsFile: file, trustOnFirstUse: true })).verify(ed25519Blob()).catch((e: unknown) => e)) as HostKeyError;
    expect((ca as HostKeyError).reason).toBe('unsupported');
    expect(ca.message).toContain('does not verify host certificates');
    expect(readFileSync(file, 'utf8').split('\n').filter((l) => l !== '')).toHaveLength(2);
  });
});
