import { BackendUnavailableError, BerthError } from '../../errors.js';

/** `host:port` as people write it (IPv6 in brackets). */
export function endpointOf(host: string, port: number): string {
  return host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`;
}

/**
 * The host presented a key berth may not trust: unknown, changed, revoked, or vouched for only by
 * a certificate authority. Exit 125; never retried on another host, never a fallback.
 */
export class HostKeyError extends BerthError {
  constructor(
    /** Why the key is refused: not in known_hosts, different from the one there, revoked, or only CA-signed. */
    readonly reason: 'unknown' | 'changed' | 'revoked' | 'unsupported',
    message: string,
  ) {
    super('host_key_refused', message);
  }
}

/** The remote host cannot run sandboxes as asked (no root, missing tools). Exit 125. */
export class RemoteHostError extends BerthError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('backend_unavailable', message, options);
  }
}

/** A connection that was up went away (closed, reset, keepalive timeout) while a channel used it. */
export class ConnectionLostError extends BackendUnavailableError {
  constructor(endpoint: string, why: string, options?: { cause?: unknown }) {
    super(`the SSH connection to ${endpoint} was lost (${why}); what ran on it was cut off, and the next call reconnects`, options);
  }
}

interface SshLikeError {
  code?: unknown;
  level?: unknown;
  message?: unknown;
}

/** Advice for what an ssh2 or socket failure usually means. */
function remedyFor(e: SshLikeError, user: string): { reason: string; fix: string } {
  const code = typeof e.code === 'string' ? e.code : undefined;
  const message = typeof e.message === 'string' ? e.message : String(e);
  if (code === 'ECONNREFUSED') return { reason: 'connection refused', fix: 'check that sshd runs there and ssh.port is right' };
  if (code === 'ENOTFOUND' || code === 'EAI_AGAIN') return { reason: `name not resolved (${code})`, fix: 'check ssh.host' };
  if (code === 'ETIMEDOUT' || code === 'EHOSTUNREACH' || code === 'ENETUNREACH') {
    return { reason: `unreachable (${code})`, fix: 'check the network path and any firewall between berth and the host' };
  }
  if (e.level === 'client-authentication') {
    return {
      reason: `authentication as "${user}" failed`,
      fix: `check that the key (ssh.identityFile or the agent) is in ${user}'s authorized_keys on the host`,
    };
  }
  if (e.level === 'client-timeout' || /timed out/i.test(message)) {
    return { reason: message, fix: 'the host did not answer in time; check that it is up and not overloaded' };
  }
  if (/no matching host key format/i.test(message)) {
    return {
      reason: 'the host offers none of the host key types that known_hosts holds for it',
      fix: 'add the key type it does offer to ssh.knownHosts (ssh-keyscan shows them; check the fingerprint on the host)',
    };
  }
  return { reason: code !== undefined ? `${code}: ${message}` : message, fix: 'check the ssh settings of this profile' };
}

/**
 * The SSH boundary's one error translator: berth's own errors pass through; a failure to connect
 * becomes a `BackendUnavailableError` that names the host, port and cause and what to do.
 */
export function fromSshError(err: unknown, target: { host: string; port: number; user: string }, doing: string): BerthError {
  if (err instanceof BerthError) return err;
  const e = (typeof err === 'object' && err !== null ? err : { message: String(err) }) as SshLikeError;
  const { reason, fix } = remedyFor(e, target.user);
  return new BackendUnavailableError(
    `cannot ${doing} on SSH host ${endpointOf(target.host, target.port)} as ${target.user}: ${reason}; ${fix}`,
    { cause: err },
  );
}
