import { describe, expect, it } from 'vitest';
import { tlsFailure } from '../../src/backends/kubernetes/tls-failure.js';

const coded = (code: string, message: string): Error => Object.assign(new Error(message), { code });

describe('tlsFailure: a handshake berth refused, however it is wrapped', () => {
  it.each([
    ['a verification error itself', coded('UNABLE_TO_VERIFY_LEAF_SIGNATURE', 'unable to verify the first certificate'), 'UNABLE_TO_VERIFY_LEAF_SIGNATURE: unable to verify the first certificate'],
    ['under a cause (the transport, fetch)', new Error('request failed', { cause: coded('SELF_SIGNED_CERT_IN_CHAIN', 'self-signed certificate in certificate chain') }), 'SELF_SIGNED_CERT_IN_CHAIN: self-signed certificate in certificate chain'],
    ['in a WebSocket ErrorEvent (the exec connection)', { type: 'error', message: 'x', error: coded('CERT_HAS_EXPIRED', 'certificate has expired') }, 'CERT_HAS_EXPIRED: certificate has expired'],
    ['a name the certificate does not cover', coded('ERR_TLS_CERT_ALTNAME_INVALID', "Hostname/IP does not match certificate's altnames"), "ERR_TLS_CERT_ALTNAME_INVALID: Hostname/IP does not match certificate's altnames"],
    ['a plain-HTTP server at an https address', coded('EPROTO', '00F8:error:0A00010B:SSL routines:ssl3_get_record:wrong version number\n'), 'the server does not speak TLS (00F8:error:0A00010B:SSL routines:ssl3_get_record:wrong version number)'],
  ])('%s', (_, err, said) => {
    expect(tlsFailure(err)).toBe(said);
  });

  it.each([
    ['a refused connection', coded('ECONNREFUSED', 'connect ECONNREFUSED 127.0.0.1:9')],
    ['a reset', new Error('socket hang up', { cause: coded('ECONNRESET', 'read ECONNRESET') })],
    ['another EPROTO', coded('EPROTO', 'unsupported protocol')],
    ['not an error', 'SELF_SIGNED_CERT_IN_CHAIN'],
  ])('is undefined for %s (an outage, retried and reported as one)', (_, err) => {
    expect(tlsFailure(err)).toBeUndefined();
  });
});
