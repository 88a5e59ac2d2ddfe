import type { CredentialSpec, EgressCredential } from './credentials.js';
import { placeholderFor } from './placeholders.js';

/*
 * What a sandbox is given when its profile uses egress, as pure functions for the integration:
 * its credentials (values and placeholders), its environment (proxy and CA variables, each
 * credential's placeholder), its CA bundle, and the strings to redact from what it returns.
 */

/**
 * The proxy's view of a sandbox's credentials: each spec with its value (looked up by `from` in
 * `values`, berth's environment or secrets file) and the sandbox's placeholder.
 *
 * @example
 * sandboxCredentials(specs, process.env, secret, identityDigest(id))
 * // { credentials: [{ name: 'GITHUB_TOKEN', value: 'ghp_..', placeholder: 'berth-ph-..', hosts: [...] }], missing: [] }
 */
export function sandboxCredentials(
  specs: readonly CredentialSpec[], values: Readonly<Record<string, string | undefined>>, secret: Buffer, sandboxDigest: string,
): { credentials: EgressCredential[]; missing: string[] } {
  const credentials: EgressCredential[] = [];
  const missing: string[] = [];
  for (const s of specs) {
    const value = values[s.from];
    if (value === undefined || value === '') {
      missing.push(s.from);
      continue;
    }
    credentials.push({
      name: s.name, value, placeholder: placeholderFor(secret, sandboxDigest, s.name), hosts: s.hosts,
      ...(s.inject === undefined ? {} : { inject: s.inject }),
    });
  }
  return { credentials, missing };
}

/** Where the sandbox finds its CA files (paths inside the sandbox). */
export interface SandboxCaPaths {
  /** The system bundle with berth's CA appended (`caBundle`). */
  bundle: string;
  /** berth's CA alone, for NODE_EXTRA_CA_CERTS (node adds it to its own roots). */
  berthCa: string;
}

/**
 * The variables a sandbox needs to use the proxy (`proxy`: its port on the sandbox's own loopback,
 * or the URL of the shared listener with the sandbox's proxy credential): the proxy in every
 * spelling programs read, loopback kept off it (always refused there), the CA bundle for every
 * common TLS stack, and each credential's placeholder under its name.
 */
export function egressEnv(proxy: number | string, ca: SandboxCaPaths, credentials: readonly EgressCredential[]): Record<string, string> {
  const url = typeof proxy === 'number' ? `http://127.0.0.1:${proxy}` : proxy;
  const env: Record<string, string> = {};
  for (const name of ['HTTP_PROXY', 'HTTPS_PROXY', 'ALL_PROXY']) {
    env[name] = url;
    env[name.toLowerCase()] = url;
  }
  env['NO_PROXY'] = env['no_proxy'] = 'localhost,127.0.0.1,::1';
  for (const name of ['SSL_CERT_FILE', 'REQUESTS_CA_BUNDLE', 'CURL_CA_BUNDLE', 'GIT_SSL_CAINFO', 'PIP_CERT', 'AWS_CA_BUNDLE', 'CARGO_HTTP_CAINFO', 'DENO_CERT']) {
    env[name] = ca.bundle;
  }
  env['NODE_EXTRA_CA_CERTS'] = ca.berthCa;
  for (const c of credentials) env[c.name] = c.placeholder;
  return env;
}

/** The sandbox's own system bundle with berth's CA appended. */
export function caBundle(systemBundlePem: string, berthCaPem: string): string {
  const sys = systemBundlePem === '' || systemBundlePem.endsWith('\n') ? systemBundlePem : `${systemBundlePem}\n`;
  return `${sys}# berth egress CA\n${berthCaPem.endsWith('\n') ? berthCaPem : `${berthCaPem}\n`}`;
}

/**
 * What to redact from everything the sandbox returns: the values (a credential host may echo one
 * back) and the placeholders, longest first like the other redacted values.
 */
export function egressRedactValues(credentials: readonly EgressCredential[]): string[] {
  return credentials.flatMap((c) => [c.value, c.placeholder]).filter((v) => v.length >= 8).sort((a, b) => b.length - a.length);
}
