import { X509Certificate } from 'node:crypto';
import { chmodSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { EgressCa } from '../../src/egress/ca.js';
import { ConfigError } from '../../src/errors.js';
import { tempDir } from '../helpers/temp-dir.js';

describe('EgressCa', () => {
  it('creates its dir 0700 and its key file 0600, and opens the same CA again', async () => {
    const dir = join(tempDir(), 'egress');
    const a = await EgressCa.open(dir);
    expect(statSync(dir).mode & 0o777).toBe(0o700);
    expect(statSync(join(dir, 'ca.pem')).mode & 0o777).toBe(0o600);
    const b = await EgressCa.open(dir);
    expect(b.certPem).toBe(a.certPem);
    const cert = new X509Certificate(a.certPem);
    expect(cert.ca).toBe(true);
    expect(cert.publicKey.asymmetricKeyDetails?.namedCurve).toBe('prime256v1');
    const years = (Date.parse(cert.validTo) - Date.now()) / (365 * 24 * 3600e3);
    expect(years).toBeGreaterThan(9.9);
  });

  it('refuses a CA file readable by others, naming the fix', async () => {
    const dir = join(tempDir(), 'egress');
    await EgressCa.open(dir);
    chmodSync(join(dir, 'ca.pem'), 0o644);
    const err = await EgressCa.open(dir).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConfigError);
    expect((err as Error).message).toBe(`"${join(dir, 'ca.pem')}" is readable by others (mode 644): run chmod 600 "${join(dir, 'ca.pem')}", or remove it to make a new one if others may have read it`);
    chmodSync(join(dir, 'ca.pem'), 0o640);
    await expect(EgressCa.open(dir)).rejects.toThrow(/readable by others \(mode 640\)/);
  });

  it('refuses a CA file that is a symlink, and one that does not hold a key and its certificate', async () => {
    const dir = join(tempDir(), 'egress');
    const other = join(tempDir(), 'elsewhere.pem');
    writeFileSync(other, 'x', { mode: 0o600 });
    await EgressCa.open(dir);
    const real = readFileSync(join(dir, 'ca.pem'), 'utf8');
    const linked = join(tempDir(), 'egress2');
    await EgressCa.open(linked);
    rmSync(join(linked, 'ca.pem'));
    symlinkSync(other, join(linked, 'ca.pem'));
    await expect(EgressCa.open(linked)).rejects.toThrow(/is a symlink/);
    writeFileSync(join(dir, 'ca.pem'), real.replace(/-----BEGIN PRIVATE KEY-----[\s\S]*?-----END PRIVATE KEY-----/, ''), { mode: 0o600 });
    await expect(EgressCa.open(dir)).rejects.toThrow(/cannot be read .*remove it to make a new CA/);
  });

  it('tightens an existing egress dir that others could enter', async () => {
    const dir = join(tempDir(), 'egress');
    await EgressCa.open(dir);
    chmodSync(dir, 0o755);
    await EgressCa.open(dir);
    expect(statSync(dir).mode & 0o777).toBe(0o700);
  });

  it('issues short-lived leaves for one host: SAN, serverAuth, not a CA, signed by the CA', async () => {
    const ca = await EgressCa.open(join(tempDir(), 'egress'));
    const leaf = await ca.leafFor('api.github.com');
    const cert = new X509Certificate(leaf.certPem);
    expect(cert.subjectAltName).toBe('DNS:api.github.com');
    expect(cert.ca).toBe(false);
    expect(cert.keyUsage).toEqual(['1.3.6.1.5.5.7.3.1']);
    expect(cert.checkIssued(new X509Certificate(ca.certPem))).toBe(true);
    expect(cert.verify(new X509Certificate(ca.certPem).publicKey)).toBe(true);
    expect(cert.checkHost('api.github.com')).toBe('api.github.com');
    expect(cert.checkHost('evil.example')).toBeUndefined();
    expect(Date.parse(cert.validTo) - Date.now()).toBeLessThanOrEqual(24 * 3600e3);
  });

  it('caches leaves (bounded, least recently used out) and renews one past half its life', async () => {
    let now = Date.now();
    const ca = await EgressCa.open(join(tempDir(), 'egress'), { leafCacheSize: 2, now: () => now });
    const a1 = await ca.leafFor('a.example');
    expect(await ca.leafFor('a.example')).toBe(a1);
    const b1 = await ca.leafFor('b.example');
    await ca.leafFor('a.example');
    await ca.leafFor('c.example');
    // b was the least recently used: gone; a stayed.
    expect(await ca.leafFor('a.example')).toBe(a1);
    expect(await ca.leafFor('b.example')).not.toBe(b1);
    now += 13 * 3600e3;
    await ca.leafFor('a.example');
    const a2 = await ca.leafFor('a.example');
    expect(a2).not.toBe(a1);
    expect(a2.notAfter.getTime()).toBeGreaterThan(a1.notAfter.getTime());
  });
});
