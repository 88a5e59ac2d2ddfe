import { EXIT_CODE } from './cli/exit-codes.js';

/**
 * Every error code berth reports: a closed set, so each edge (HTTP status, CLI exit code, MCP
 * error kind) maps all of them in one table the compiler checks (`server/http-error.ts`,
 * `cli/exit-codes.ts`, `server/mcp/error-kinds.ts`). Adding a code means deciding its answer at
 * every edge.
 */
export type ErrorCode =
  // The caller's input is wrong.
  | 'usage'
  | 'offset_out_of_range'
  | 'upload_incomplete'
  // The operator's config is wrong or cannot be honoured.
  | 'config_invalid'
  // Refused by policy or by what the caller's credentials allow.
  | 'policy_refused'
  | 'profile_forbidden'
  | 'host_backend_forbidden'
  // Something the call named does not exist.
  | 'not_found'
  | 'path_not_found'
  | 'job_not_found'
  // Over a bound.
  | 'too_large'
  | 'tenant_limit'
  | 'disk_limit_exceeded'
  // The backend cannot do this at all.
  | 'unsupported'
  | 'job_start_failed'
  // Gone or going while the call ran; retrying may work.
  | 'backend_unavailable'
  | 'host_key_refused'
  | 'shutting_down'
  | 'shell_closed'
  | 'warden_closed'
  | 'session_closed'
  | 'timeout'
  // berth, its engine or a helper in the sandbox failed.
  | 'shell_start_failed'
  | 'sandbox_start_failed'
  | 'spawn_failed'
  | 'warden_gone'
  | 'kill_helper_failed'
  | 'transfer_failed'
  | 'staging_unsafe'
  | 'job_read_failed'
  | 'disk_measure_failed'
  | 'disk_image_failed'
  | 'helper_output_too_large'
  | 'docker_error'
  | 'invalid_ref'
  | 'image_pull_failed'
  | 'image_build_failed'
  | 'listen_failed'
  // A bug in berth.
  | 'internal';

/**
 * One error base for everything berth reports. `code` is stable and machine-readable;
 * the message names the thing, the limit and the fix. Formatting for people happens once,
 * at the edge (CLI, HTTP, MCP), each edge deciding by `code`.
 */
export class BerthError extends Error {
  readonly code: ErrorCode;

  constructor(code: ErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.code = code;
  }

  /** The exit code the CLI ends with for this error: its code's entry in `EXIT_CODE`. */
  get exitCode(): number {
    return EXIT_CODE[this.code];
  }
}

/** Config that is unknown, contradictory or cannot be honoured. CLI exit 2. */
export class ConfigError extends BerthError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('config_invalid', message, options);
  }
}

/** Bad arguments from the caller (CLI flags, API input). CLI exit 2. */
export class UsageError extends BerthError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('usage', message, options);
  }
}

/** Policy refused the call (mount of a credential surface, no user in user scope, ...). Exit 125. */
export class PolicyRefusedError extends BerthError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('policy_refused', message, options);
  }
}

/** The configured backend cannot be reached or is not built. Never a fallback. Exit 125. */
export class BackendUnavailableError extends BerthError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('backend_unavailable', message, options);
  }
}

/** A backend cannot do what was asked (typed, so nothing falls back to the host). Exit 125. */
export class UnsupportedError extends BerthError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('unsupported', message, options);
  }
}

/** A sandbox or its image does not exist. Exit 125. */
export class SandboxNotFoundError extends BerthError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('not_found', message, options);
  }
}

/** A wait ran out of time (not a command timeout: those are results with exit code 124). */
export class TimeoutError extends BerthError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('timeout', message, options);
  }
}

export function isBerthError(err: unknown): err is BerthError {
  return err instanceof BerthError;
}
