import type { CredentialSpec } from '../egress/credentials.js';
import type { EgressPolicy } from '../egress/policy.js';

/*
 * berth's own settings, validated and immutable: what a profile may override (`CoreSettings`) and
 * the top-level sections. The whole config, with each backend module's section beside these, is
 * assembled in setup/ (`BerthConfig`); nothing here knows a backend.
 */

export const SCOPE_MODES = ['auto', 'shared', 'profile', 'user', 'session', 'task'] as const;
export type ScopeMode = (typeof SCOPE_MODES)[number];

export interface EnvSettings {
  static: Readonly<Record<string, string>>;
  forward: readonly string[];
  perUserPrefix: string;
  /** Redact forwarded and per-user values (>= 8 chars) from returned output. */
  redact: boolean;
  /**
   * Absolute path of a `.env`-style secrets file read once at start-up (global values, and
   * per-user `[platform:id]` sections); see config/secrets-file.ts. Undefined when unset.
   */
  secretsFile?: string | undefined;
}

/** Everything a profile may override but the backends' own sections. */
export interface CoreSettings {
  /** The name of a backend module of the config's catalog. */
  backend: string;
  scope: ScopeMode;
  persistent: boolean;
  /** `""` in the file means unset, stored as `undefined`. */
  sharedKey: string | undefined;
  userSandbox: boolean;
  workspace: {
    mount: boolean;
    /** When non-empty, an attached workspace must lie under one of these (real, absolute) dirs. */
    allowedRoots: readonly string[];
  };
  exec: { timeoutSeconds: number; maxOutputChars: number };
  /**
   * `idleSeconds`: an ephemeral sandbox with no activity for this long is removed.
   * `hibernateSeconds`: a persistent one is hibernated (stopped, files and shell state kept, resumed
   * by the next call); 0: never.
   */
  lifecycle: { idleSeconds: number; hibernateSeconds: number };
  /**
   * Sandboxes a long-lived broker keeps created and started for this profile's new ephemeral
   * sessions without a host mount (broker/warm-pool.ts); 0 (the default): none.
   */
  warmPool: { size: number };
  /**
   * File transfer (upload, export, read, media): `maxBytes` caps one transfer (an archive's entries
   * count against it too); `mediaMode: copy` hands out a copy in staging, `live` a path under a
   * bind the agent can still change (opt-in, see the README).
   */
  files: { maxBytes: number; mediaMode: 'copy' | 'live' };
  env: EnvSettings;
  /** What the sandbox's network may reach (`egress:`, docs/egress.md); no section: `open`. */
  egress: EgressPolicy;
  /** Secretless credentials (`credentials:`): the sandbox holds placeholders, the proxy the values. */
  credentials: readonly CredentialSpec[];
}

/** The egress proxy of a berth process (top level only). */
export interface EgressProxySettings {
  /** A PEM bundle the proxy trusts for upstream TLS besides the system store (a private endpoint's CA). */
  upstreamCaFile: string | undefined;
  /** Connections one sandbox may hold open to the proxy at once; one more is closed as it arrives. */
  maxConnectionsPerSandbox: number;
  /**
   * `IP:port` on this host where the shared listener serves sandboxes whose network berth cannot
   * enter (kubernetes pods); they name themselves by their proxy credential.
   */
  listen: string | undefined;
  /** `IP:port` those sandboxes reach the listener at (this host's address as they see it), the only address their NetworkPolicy admits. */
  advertise: string | undefined;
}

/** `berth serve` settings (top level only). */
export interface ServerSettings {
  /**
   * Tokens may use profiles whose backend runs on the host (`local`, no isolation). Off by
   * default: `berth serve` refuses to start while a token could reach such a profile.
   */
  allowHostBackend: boolean;
  /** `GET /metrics`. */
  metrics: {
    /**
     * Label counts with the tenant (calls, refusals, sandboxes, sessions). Off by default: a
     * scrape then tells nothing about who uses berth, only how much.
     */
    perTenant: boolean;
  };
  /**
   * Connections open at once, from every client together; one more is closed as it arrives
   * (before a byte of it is read). Each costs berth a file descriptor, which its sandboxes need too.
   */
  maxConnections: number;
  /**
   * Connections open at once from one client address (an IPv6 client: its /64); one more is closed
   * as it arrives. Behind a proxy every client has the proxy's address: raise it to `maxConnections`.
   */
  maxConnectionsPerAddress: number;
  /** A connection whose request head (request line and headers) is not complete this long after it began is answered 408 and closed; a connection that sends nothing at all too. */
  headerTimeoutSeconds: number;
  /** A connection idle this long between two requests is closed (node adds a second of slack). */
  keepAliveSeconds: number;
  /**
   * A request whose body gets no byte for this long is cut (the connection is closed). Only the
   * client's silence counts: a body berth has not read yet (its call waits for the session) or an
   * answer being worked on are not cut, however long.
   */
  bodyStallSeconds: number;
}

/** Bounds per tenant, across its sessions and profiles (top level only). */
export interface TenantLimits {
  /** `berth serve`: calls of one tenant running at once; past it a call gets 429. */
  concurrentCalls: number;
  /** `berth serve`: request body bytes of one tenant being received at once (uploads). */
  uploadBytesInFlight: number;
  /** Bytes of exports one tenant may keep in staging at once. */
  stagingBytes: number;
  /** `berth serve`: MCP sessions one tenant may hold open at once; past it an initialize gets 429. */
  mcpSessions: number;
  /** Sandboxes one tenant may hold at once (ephemeral and persistent); past it a new one is refused (429). */
  sandboxes: number;
  /**
   * Sandboxes this berth process keeps running at once, all tenants together; past it, the least
   * recently used idle persistent one hibernates to make room, and a call that finds none is
   * refused (`at_capacity`, 503). Undefined: no bound (the engine's own limits apply).
   */
  liveSandboxes: number | undefined;
  /**
   * Memory limits of one tenant's sandboxes added up, in MiB (each counts what its backend lets it
   * use: `docker.memoryMb` or its default); undefined: the host's memory.
   */
  memoryMb: number | undefined;
  /**
   * Disk bounds of one tenant's sandboxes added up, in MiB (`docker.diskMb` or its default);
   * undefined: the size of the filesystem that holds `BERTH_HOME`.
   */
  diskMb: number | undefined;
  /** Snapshots one tenant may keep (named ones and fork bases); past it a snapshot or fork is refused (0: none at all). */
  snapshots: number;
  /** Bytes one tenant's snapshots may take on the host; undefined: the size of the filesystem that holds `BERTH_HOME`. */
  snapshotBytes: number | undefined;
  /** A named snapshot older than this many days is removed by the periodic sweep. */
  snapshotRetentionDays: number;
}

/** The audit log (top level only). */
export interface AuditSettings {
  /** A recorded command text is cut to this many characters (the cut is marked). */
  maxCommandChars: number;
  /** Entries older than this are deleted (at start-up and by the periodic sweep). */
  retentionDays: number;
}

/** The places of a config: the top level's merged settings and each named profile's. */
export interface ConfigPlaces<S extends CoreSettings = CoreSettings> {
  /** Settings of profiles without a `profiles.<name>` section (and of `default`, unless overridden). */
  readonly base: S;
  /** Fully merged settings per named profile section. */
  readonly profiles: Readonly<Record<string, S>>;
}

/** The settings of `profile`: its own section's, else the top level's. */
export function settingsFor<S extends CoreSettings>(config: ConfigPlaces<S>, profile: string): S {
  return Object.hasOwn(config.profiles, profile) ? config.profiles[profile]! : config.base;
}
