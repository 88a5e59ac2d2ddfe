/**
 * Where and how to reach one SSH host: what a profile's `ssh:` settings resolve to. Pure data.
 * Exactly one of `identityFile` and `agentSocket` authenticates; agent forwarding is never
 * requested, whatever the server allows.
 */
export interface SshTarget {
  host: string;
  /** Default 22. */
  port: number;
  /** The login user on the host; it must be root (see accounts.ts). */
  user: string;
  /** Private key file (unencrypted; use an agent for a key with a passphrase). */
  identityFile?: string | undefined;
  /** ssh-agent socket path, used for authentication only. */
  agentSocket?: string | undefined;
  /** known_hosts file the host key is checked against. */
  knownHostsFile: string;
  /** Record an unknown host key on first connect instead of refusing. A changed key is always refused. */
  trustOnFirstUse: boolean;
}

/** How the pool treats connections (a profile's ssh settings beyond the target). */
export interface PoolSettings {
  /** SSH keepalive every this many ms on every connection; 0 turns keepalives off. */
  keepaliveIntervalMs: number;
  /** Unanswered keepalives before the connection counts as lost. */
  keepaliveCountMax: number;
  /** Channels one connection may hold: the server's MaxSessions (sshd's default 10; SFTP counts). */
  maxSessions: number;
  /** Bound on TCP connect + handshake + authentication. */
  connectTimeoutMs: number;
  /** A connection with no channel for this long is closed. */
  idleCloseMs: number;
}

export const DEFAULT_POOL_SETTINGS: Readonly<PoolSettings> = {
  keepaliveIntervalMs: 15_000,
  keepaliveCountMax: 3,
  maxSessions: 10,
  connectTimeoutMs: 20_000,
  idleCloseMs: 60_000,
};

/** The pool key: one set of connections per distinct (host, port, user, credentials, trust file). */
export function targetKey(t: SshTarget): string {
  return JSON.stringify([t.host.toLowerCase(), t.port, t.user, t.identityFile ?? '', t.agentSocket ?? '', t.knownHostsFile, t.trustOnFirstUse]);
}
