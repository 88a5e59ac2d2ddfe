/*
 * A TLS handshake that failed because berth does not trust the API server's certificate (or the
 * server does not speak TLS at all). Not an outage: asking again meets the same certificate, so
 * such a failure is neither retried nor reported as "did not answer".
 */

/** OpenSSL's verification results as node reports them, and node's own name check. */
const UNTRUSTED = new Set([
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'SELF_SIGNED_CERT_IN_CHAIN',
  'UNABLE_TO_GET_ISSUER_CERT',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'CERT_SIGNATURE_FAILURE',
  'CERT_NOT_YET_VALID',
  'CERT_HAS_EXPIRED',
  'CERT_UNTRUSTED',
  'CERT_REJECTED',
  'CERT_REVOKED',
  'INVALID_CA',
  'INVALID_PURPOSE',
  'HOSTNAME_MISMATCH',
  'ERR_TLS_CERT_ALTNAME_INVALID',
]);

/** What went wrong, for a message (`SELF_SIGNED_CERT_IN_CHAIN: self-signed certificate in certificate chain`), or undefined when `err` is no TLS trust failure. */
export function tlsFailure(err: unknown): string | undefined {
  // Through `cause` (berth's and fetch's wrappers) and `error` (a WebSocket's ErrorEvent), a few levels deep.
  for (let e = err, depth = 0; e !== null && typeof e === 'object' && depth < 5; depth++) {
    const { code, message } = e as { code?: unknown; message?: unknown };
    if (typeof code === 'string' && UNTRUSTED.has(code)) return `${code}: ${String(message)}`;
    if (code === 'EPROTO' && /wrong version number|packet length too long/.test(String(message))) return `the server does not speak TLS (${String(message).trim()})`;
    e = (e as { cause?: unknown }).cause ?? (e as { error?: unknown }).error;
  }
  return undefined;
}

/** The remedy a message about `tlsFailure` names. */
export const TLS_REMEDY =
  "give the kubeconfig's cluster the CA that signed the API server's certificate (certificate-authority-data or certificate-authority), and check its server address matches the certificate; see kubernetes.kubeconfig / kubernetes.context";
