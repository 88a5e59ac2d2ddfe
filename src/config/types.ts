/** The validated, immutable shape of berth's configuration. Built only by `loadConfig`/`parseConfig`. */

export const BACKENDS = ['docker', 'local', 'ssh'] as const;
export type BackendName = (typeof BACKENDS)[number];

export const SCOPE_MODES = ['auto', 'shared', 'profile', 'user', 'session', 'task'] as const;
export type ScopeMode = (typeof SCOPE_MODES)[number];

/** Docker settings. Optional limits stay `undefined` when the user did not set them, so the
 * backend can tell an explicit limit (error if unsupported) from its own default (warning). */
export interface DockerSettings {
  image: string;
  network: 'bridge' | 'none';
  memoryMb: number | undefined;
  cpus: number | undefined;
  pidsLimit: number | undefined;
  shmSizeMb: number | undefined;
  tmpSizeMb: number | undefined;
  /** tmpfs size for ephemeral sandboxes' /workspace and home. */
  ephemeralSizeMb: number | undefined;
  runAsHostUser: boolean;
  /** `host:container[:ro]`, checked against the credential-surface refusals. */
  volumes: string[];
}

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

/** Everything a profile may override; `settingsFor(config, profile)` returns the merged view. */
export interface ProfileSettings {
  backend: BackendName;
  scope: ScopeMode;
  persistent: boolean;
  /** `""` in the file means unset, stored as `undefined`. */
  sharedKey: string | undefined;
  userSandbox: boolean;
  workspace: { mount: boolean };
  exec: { timeoutSeconds: number; maxOutputChars: number };
  lifecycle: { idleSeconds: number };
  /** File transfer (upload, export, read, media): the size cap of one transfer. */
  files: { maxBytes: number };
  env: EnvSettings;
  docker: DockerSettings;
}

export interface BerthConfig {
  multiProfile: boolean;
  /** Settings of profiles without a `profiles.<name>` section (and of `default`, unless overridden). */
  base: ProfileSettings;
  /** Fully merged settings per named profile section. */
  profiles: Readonly<Record<string, ProfileSettings>>;
  /** Where the config came from (a path), or undefined for built-in defaults. */
  source: string | undefined;
}

export function settingsFor(config: BerthConfig, profile: string): ProfileSettings {
  return Object.hasOwn(config.profiles, profile) ? config.profiles[profile]! : config.base;
}

/** Backends that run sandboxes as containers or VMs (DESIGN: "container"). */
export function isContainerBackend(backend: BackendName): boolean {
  return backend === 'docker';
}
