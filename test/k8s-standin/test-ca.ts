import 'reflect-metadata';
import { randomBytes, webcrypto } from 'node:crypto';
import * as x509 from '@peculiar/x509';

/*
 * The stand-in's TLS material, made fresh for each server: a CA (what a kubeconfig's
 * `certificate-authority-data` carries) and a serving certificate it signed for the loopback
 * address, as a cluster's API server presents one signed by the cluster CA. Nothing else trusts
 * the CA, so a client without it in its kubeconfig fails the handshake, as it would against a
 * real cluster.
 */

const ALG = { name: 'ECDSA', namedCurve: 'P-256' } as const;
const SIGNING = { name: 'ECDSA', hash: 'SHA-256' } as const;
const HOUR_MS = 60 * 60 * 1000;

type CryptoKeyPair = webcrypto.CryptoKeyPair;

x509.cryptoProvider.set(webcrypto as unknown as Parameters<typeof x509.cryptoProvider.set>[0]);

export interface StandinTls {
  /** The CA certificate, PEM. */
  caPem: string;
  /** The API server's certificate (SANs 127.0.0.1, ::1, localhost, kubernetes.default.svc) and its key, PEM. */
  certPem: string;
  keyPem: string;
}

/** A new CA and the serving certificate it signed, valid for a day (backdated an hour). */
export async function makeStandinTls(now = Date.now()): Promise<StandinTls> {
  const caKeys = (await webcrypto.subtle.generateKey(ALG, true, ['sign', 'verify'])) as CryptoKeyPair;
  const ca = await x509.X509CertificateGenerator.createSelfSigned({
    serialNumber: serial(),
    name: `CN=berth-standin-ca-${randomBytes(4).toString('hex')}`,
    notBefore: new Date(now - HOUR_MS),
    notAfter: new Date(now + 24 * HOUR_MS),
    signingAlgorithm: SIGNING,
    keys: caKeys,
    extensions: [
      new x509.BasicConstraintsExtension(true, 0, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign, true),
      await x509.SubjectKeyIdentifierExtension.create(caKeys.publicKey),
    ],
  });
  const keys = (await webcrypto.subtle.generateKey(ALG, true, ['sign', 'verify'])) as CryptoKeyPair;
  const cert = await x509.X509CertificateGenerator.create({
    serialNumber: serial(),
    subject: 'CN=kube-apiserver',
    issuer: ca.subject,
    notBefore: new Date(now - HOUR_MS),
    notAfter: new Date(now + 24 * HOUR_MS),
    signingAlgorithm: SIGNING,
    publicKey: keys.publicKey,
    signingKey: caKeys.privateKey,
    extensions: [
      new x509.BasicConstraintsExtension(false, undefined, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature, true),
      new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.serverAuth]),
      new x509.SubjectAlternativeNameExtension([
        { type: 'ip', value: '127.0.0.1' },
        { type: 'ip', value: '::1' },
        { type: 'dns', value: 'localhost' },
        { type: 'dns', value: 'kubernetes.default.svc' },
      ]),
      await x509.AuthorityKeyIdentifierExtension.create(ca),
      await x509.SubjectKeyIdentifierExtension.create(keys.publicKey),
    ],
  });
  const keyDer = await webcrypto.subtle.exportKey('pkcs8', keys.privateKey);
  return {
    caPem: `${ca.toString('pem')}\n`,
    certPem: `${cert.toString('pem')}\n`,
    keyPem: `${x509.PemConverter.encode([{ type: 'PRIVATE KEY', rawData: keyDer }])}\n`,
  };
}

/** A positive 16-byte serial. */
function serial(): string {
  const b = randomBytes(16);
  b[0] = b[0]! & 0x7f;
  return b.toString('hex');
}
