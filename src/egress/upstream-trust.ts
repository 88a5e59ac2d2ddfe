import { readFileSync } from 'node:fs';
import { createSecureContext, rootCertificates, type SecureContext } from 'node:tls';
import { ConfigError } from '../errors.js';

/*
 * Whom the proxy trusts when it speaks TLS to an intercepted host's real server: the system's
 * trust store (node's bundled Mozilla roots plus the distribution's bundle, which carries the
 * roots an operator installed with update-ca-certificates), and an optional operator bundle.
 */

/** Where distributions keep their bundle: Debian/Ubuntu/Alpine, Fedora/RHEL, openSUSE, macOS/BSD. */
const SYSTEM_BUNDLES = ['/etc/ssl/certs/ca-certificates.crt', '/etc/pki/tls/certs/ca-bundle.crt', '/etc/ssl/ca-bundle.pem', '/etc/ssl/cert.pem'];

export interface UpstreamTrust {
  /** Trust the system store (default true). Off only for tests that want nothing but their own CA. */
  system?: boolean;
  /** PEM certificates the operator adds (a company CA, a test CA). */
  extraCaPem?: string;
}

/**
 * One TLS context for every upstream connection (so no connection parses the roots again).
 *
 * @throws ConfigError when the operator's bundle holds no certificate or one that does not parse.
 */
export function upstreamContext(trust: UpstreamTrust = {}): SecureContext {
  const ca: string[] = [];
  if (trust.system !== false) {
    ca.push(...rootCertificates);
    const bundle = firstReadable(SYSTEM_BUNDLES);
    if (bundle !== undefined) ca.push(bundle);
  }
  if (trust.extraCaPem !== undefined) {
    if (!trust.extraCaPem.includes('-----BEGIN CERTIFICATE-----')) {
      throw new ConfigError('the upstream CA bundle holds no PEM certificate; give a file of "-----BEGIN CERTIFICATE-----" blocks');
    }
    ca.push(trust.extraCaPem);
  }
  try {
    return createSecureContext({ ca, minVersion: 'TLSv1.2' });
  } catch (e) {
    throw new ConfigError(`the upstream CA bundle cannot be read (${(e as Error).message}); check that it holds PEM certificates`, { cause: e });
  }
}

/** This host's system bundle (PEM), or '' when it has none at the usual places. */
export function systemBundlePem(): string {
  return firstReadable(SYSTEM_BUNDLES) ?? '';
}

function firstReadable(paths: readonly string[]): string | undefined {
  for (const p of paths) {
    try {
      return readFileSync(p, 'utf8');
    } catch {
      // Not this distribution's path.
    }
  }
  return undefined;
}
