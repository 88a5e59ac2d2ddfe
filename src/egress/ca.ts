// @peculiar/x509 needs the Reflect metadata API loaded first; only this module uses it, and berth loads it lazily.
import 'reflect-metadata';
import { createPrivateKey, webcrypto, X509Certificate as NodeX509 } from 'node:crypto';
import { join } from 'node:path';
import { createSecureContext, type SecureContext } from 'node:tls';
import * as x509 from '@peculiar/x509';
import { createPrivateFileOnce, preparePrivateDir, readPrivateFile } from './private-files.js';

/*
 * The installation's egress CA: it signs the leaf certificates the proxy shows a sandbox when it
 * intercepts a credential host. Sandboxes trust it (their CA bundle has it added); nothing else
 * does. Its key never leaves BERTH_HOME (dir 0700, file 0600).
 *
 * Name constraints are not set: the CA is made once per installation and lives for years, while
 * the credential hosts change with the config, and a sandbox trusts the CA it was given at
 * creation. A constraint fixed at creation would either go stale or force a new CA (and new
 * trust stores in every sandbox) whenever a host is added. The CA is trusted by sandboxes only,
 * whose traffic goes through berth anyway, so a constraint would protect little.
 */

const CA_FILE = 'ca.pem';
const ALG = { name: 'ECDSA', namedCurve: 'P-256' } as const;
const SIGNING = { name: 'ECDSA', hash: 'SHA-256' } as const;
const DAY_MS = 24 * 60 * 60 * 1000;
const CA_VALIDITY_MS = 3650 * DAY_MS;
/** Leaves live a day; one is made anew once less than half of that is left. */
const LEAF_VALIDITY_MS = DAY_MS;
const LEAF_RENEW_MS = LEAF_VALIDITY_MS / 2;
/** Backdated a little, for a sandbox whose clock runs behind the host's. */
const CLOCK_SKEW_MS = 60 * 60 * 1000;
const DEFAULT_LEAF_CACHE = 512;

type CryptoKey = webcrypto.CryptoKey;
type CryptoKeyPair = webcrypto.CryptoKeyPair;

x509.cryptoProvider.set(webcrypto as unknown as Parameters<typeof x509.cryptoProvider.set>[0]);

/** A leaf certificate for one host, and its key, both PEM. */
export interface Leaf {
  certPem: string;
  keyPem: string;
  notAfter: Date;
}

interface CachedLeaf {
  leaf: Leaf;
  context: SecureContext;
}

export interface EgressCaOptions {
  /** How many hosts' leaves to keep (least recently used go first). Default 512. */
  leafCacheSize?: number;
  /** The clock, for tests. */
  now?: () => number;
}

/**
 * The per-installation CA.
 *
 * @example
 * const ca = await EgressCa.open(join(berthHome, 'egress'));
 * writeFileSync(bundleInSandbox, systemBundle + ca.certPem);
 * const ctx = await ca.secureContextFor('api.github.com'); // for a TLS server socket
 */
export class EgressCa {
  private readonly leaves = new Map<string, Promise<CachedLeaf>>();

  private constructor(
    /** The CA certificate, PEM: what sandboxes add to their trust store. */
    readonly certPem: string,
    private readonly cert: x509.X509Certificate,
    private readonly key: CryptoKey,
    private readonly opts: Required<EgressCaOptions>,
  ) {}

  /**
   * The CA in `dir`, created on first use (`ca.pem`: key and certificate, 0600; dir 0700).
   *
   * @throws ConfigError when the file is readable by others, not berth's own, or a symlink.
   */
  static async open(dir: string, options: EgressCaOptions = {}): Promise<EgressCa> {
    const opts = { leafCacheSize: options.leafCacheSize ?? DEFAULT_LEAF_CACHE, now: options.now ?? Date.now };
    preparePrivateDir(dir);
    const path = join(dir, CA_FILE);
    let pem = readPrivateFile(path)?.toString('utf8');
    if (pem === undefined) {
      createPrivateFileOnce(path, await createCaPem(opts.now()));
      pem = readPrivateFile(path)!.toString('utf8');
    }
    const { cert, key } = await parseCaPem(pem, path);
    return new EgressCa(cert.toString('pem'), cert, key, opts);
  }

  /** A TLS context serving `host`'s leaf: cached, made anew when half its life is gone. */
  async secureContextFor(host: string): Promise<SecureContext> {
    return (await this.cached(host)).context;
  }

  /** `host`'s leaf certificate and key (PEM), from the same cache. */
  async leafFor(host: string): Promise<Leaf> {
    return (await this.cached(host)).leaf;
  }

  private async cached(host: string): Promise<CachedLeaf> {
    const hit = this.leaves.get(host);
    if (hit !== undefined) {
      const c = await hit.catch(() => undefined);
      if (c !== undefined && c.leaf.notAfter.getTime() - this.opts.now() > LEAF_RENEW_MS) {
        // Least recently used first: a hit moves to the end.
        this.leaves.delete(host);
        this.leaves.set(host, hit);
        return c;
      }
      if (this.leaves.get(host) === hit) this.leaves.delete(host);
    }
    const made = this.issue(host).then((leaf) => ({ leaf, context: createSecureContext({ cert: leaf.certPem, key: leaf.keyPem }) }));
    this.leaves.set(host, made);
    made.catch(() => this.leaves.get(host) === made && this.leaves.delete(host));
    while (this.leaves.size > this.opts.leafCacheSize) this.leaves.delete(this.leaves.keys().next().value!);
    return made;
  }

  private async issue(host: string): Promise<Leaf> {
    const now = this.opts.now();
    const keys = await webcrypto.subtle.generateKey(ALG, true, ['sign', 'verify']) as CryptoKeyPair;
    const notAfter = new Date(now + LEAF_VALIDITY_MS);
    const cert = await x509.X509CertificateGenerator.create({
      serialNumber: randomSerial(),
      subject: `CN=${host}`,
      issuer: this.cert.subject,
      notBefore: new Date(now - CLOCK_SKEW_MS),
      notAfter,
      signingAlgorithm: SIGNING,
      publicKey: keys.publicKey,
      signingKey: this.key,
      extensions: [
        new x509.BasicConstraintsExtension(false, undefined, true),
        new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature, true),
        new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.serverAuth]),
        new x509.SubjectAlternativeNameExtension([{ type: 'dns', value: host }]),
        await x509.AuthorityKeyIdentifierExtension.create(this.cert),
        await x509.SubjectKeyIdentifierExtension.create(keys.publicKey),
      ],
    });
    return { certPem: cert.toString('pem'), keyPem: await pkcs8Pem(keys.privateKey), notAfter };
  }
}

async function createCaPem(now: number): Promise<string> {
  const keys = await webcrypto.subtle.generateKey(ALG, true, ['sign', 'verify']) as CryptoKeyPair;
  const cert = await x509.X509CertificateGenerator.createSelfSigned({
    serialNumber: randomSerial(),
    name: `CN=berth egress CA ${randomSerial().slice(0, 8)}, O=berth`,
    notBefore: new Date(now - CLOCK_SKEW_MS),
    notAfter: new Date(now + CA_VALIDITY_MS),
    signingAlgorithm: SIGNING,
    keys,
    extensions: [
      new x509.BasicConstraintsExtension(true, 0, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign, true),
      await x509.SubjectKeyIdentifierExtension.create(keys.publicKey),
    ],
  });
  return `${await pkcs8Pem(keys.privateKey)}${cert.toString('pem')}\n`;
}

async function parseCaPem(pem: string, path: string): Promise<{ cert: x509.X509Certificate; key: CryptoKey }> {
  try {
    const structs = x509.PemConverter.decodeWithHeaders(pem);
    const keyDer = structs.find((s) => s.type === 'PRIVATE KEY')?.rawData;
    const certDer = structs.find((s) => s.type === 'CERTIFICATE')?.rawData;
    if (keyDer === undefined || certDer === undefined) throw new Error('it needs a PRIVATE KEY and a CERTIFICATE block');
    const key = await webcrypto.subtle.importKey('pkcs8', keyDer, ALG, false, ['sign']) as CryptoKey;
    const cert = new x509.X509Certificate(certDer);
    // The key must be the certificate's: node checks the pair.
    const nodeKey = createPrivateKey({ key: Buffer.from(keyDer), format: 'der', type: 'pkcs8' });
    if (!new NodeX509(Buffer.from(certDer)).checkPrivateKey(nodeKey)) throw new Error('its key does not belong to its certificate');
    return { cert, key };
  } catch (e) {
    throw new Error(`egress CA "${path}" cannot be read (${(e as Error).message}); remove it to make a new CA (sandboxes then need the new certificate)`, { cause: e });
  }
}

async function pkcs8Pem(key: CryptoKey): Promise<string> {
  const der = await webcrypto.subtle.exportKey('pkcs8', key);
  return `${x509.PemConverter.encode([{ type: 'PRIVATE KEY', rawData: der }])}\n`;
}

/** A positive 16-byte serial (the high bit clear, so DER needs no sign byte). */
function randomSerial(): string {
  const b = webcrypto.getRandomValues(new Uint8Array(16));
  b[0] = b[0]! & 0x7f;
  return Buffer.from(b).toString('hex');
}
