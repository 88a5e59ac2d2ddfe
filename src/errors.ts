/**
 * Every error code berth reports: a closed set, each in one category (`ERROR_CATEGORY`), from
 * which every edge reads its answer: the HTTP status (`server/http-error.ts`), the CLI exit code
 * (`cli/exit-codes.ts`), the MCP answer (`server/mcp/server.ts`), whether it counts as a refusal
 * and whether it is the caller's own making. Adding a code means choosing its category.
 */
export type ErrorCode =
  | 'usage'
  | 'offset_out_of_range'
  | 'upload_incomplete'
  | 'config_invalid'
  | 'policy_refused'
  | 'profile_forbidden'
  | 'host_backend_forbidden'
  | 'host_key_refused'
  | 'not_found'
  | 'path_not_found'
  | 'job_not_found'
  | 'too_large'
  | 'tenant_limit'
  | 'at_capacity'
  | 'disk_limit_exceeded'
  | 'sandbox_busy'
  | 'unsupported'
  | 'backend_unavailable'
  | 'shutting_down'
  | 'shell_closed'
  | 'warden_closed'
  | 'session_closed'
  | 'timeout'
  | 'job_start_failed'
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
  | 'engine_refused'
  | 'invalid_ref'
  | 'image_pull_failed'
  | 'image_build_failed'
  | 'listen_failed'
  | 'internal';

/** What an error says about who can do something about it; each edge answers by it. */
export type ErrorCategory =
  /** The caller's input is wrong: it can send another. */
  | 'input'
  /** The operator's config is wrong or cannot be honoured: no request can fix it. */
  | 'config'
  /** Refused by policy, by what the caller's credentials allow, or by a trust check (a host key). */
  | 'refused'
  /** Something the call named does not exist. */
  | 'not_found'
  /** Over a bound: a size, a tenant's limit, a sandbox's disk. */
  | 'bound'
  /** The backend cannot do this at all. */
  | 'unsupported'
  /** Gone or going while the call ran (a backend down, a shutdown, a session closed): retrying may work. */
  | 'gone'
  /** berth, its engine or a helper in the sandbox failed. */
  | 'fault'
  /** A bug in berth. */
  | 'bug';

/** The category of every code: the one table each edge reads (the compiler checks it is complete). */
export const ERROR_CATEGORY: Readonly<Record<ErrorCode, ErrorCategory>> = {
  usage: 'input',
  offset_out_of_range: 'input',
  upload_incomplete: 'input',
  config_invalid: 'config',
  policy_refused: 'refused',
  profile_forbidden: 'refused',
  host_backend_forbidden: 'refused',
  // A host key berth may not trust is a decision, not an outage: retrying reaches the same key.
  host_key_refused: 'refused',
  not_found: 'not_found',
  path_not_found: 'not_found',
  job_not_found: 'not_found',
  too_large: 'bound',
  tenant_limit: 'bound',
  disk_limit_exceeded: 'bound',
  // limits.liveSandboxes reached with nothing idle to hibernate: a later call may find room.
  at_capacity: 'gone',
  // A command or job runs in the sandbox a snapshot, restore or fork needs idle: retrying after it ends works.
  sandbox_busy: 'gone',
  unsupported: 'unsupported',
  backend_unavailable: 'gone',
  shutting_down: 'gone',
  shell_closed: 'gone',
  warden_closed: 'gone',
  session_closed: 'gone',
  timeout: 'gone',
  // The job's start line failed in the sandbox: a failure there, not a backend that cannot run jobs.
  job_start_failed: 'fault',
  shell_start_failed: 'fault',
  sandbox_start_failed: 'fault',
  spawn_failed: 'fault',
  warden_gone: 'fault',
  kill_helper_failed: 'fault',
  transfer_failed: 'fault',
  staging_unsafe: 'fault',
  job_read_failed: 'fault',
  disk_measure_failed: 'fault',
  disk_image_failed: 'fault',
  helper_output_too_large: 'fault',
  // An engine (docker, a Kubernetes API server) answered and refused what berth asked.
  engine_refused: 'fault',
  invalid_ref: 'fault',
  image_pull_failed: 'fault',
  image_build_failed: 'fault',
  listen_failed: 'fault',
  internal: 'bug',
};

/** Refused (by policy, credentials, a trust check or a bound), not failed: what `berth_refusals_total` counts. */
export function isRefusalCategory(category: ErrorCategory): boolean {
  return category === 'refused' || category === 'bound';
}

/**
 * Of the caller's own making: its input, a refusal, a bound. Such an error says the same whether
 * or not a close of its session overtook the call, so it is reported as it is.
 */
export function isCallerError(code: ErrorCode): boolean {
  const category = ERROR_CATEGORY[code];
  return category === 'input' || isRefusalCategory(category);
}

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
}

/** Config that is unknown, contradictory or cannot be honoured. */
export class ConfigError extends BerthError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('config_invalid', message, options);
  }
}

/** Bad arguments from the caller (CLI flags, API input). */
export class UsageError extends BerthError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('usage', message, options);
  }
}

/** Policy refused the call (mount of a credential surface, no user in user scope, ...). */
export class PolicyRefusedError extends BerthError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('policy_refused', message, options);
  }
}

/** The configured backend cannot be reached or is not built. Never a fallback. */
export class BackendUnavailableError extends BerthError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('backend_unavailable', message, options);
  }
}

/** A backend cannot do what was asked (typed, so nothing falls back to the host). */
export class UnsupportedError extends BerthError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('unsupported', message, options);
  }
}

/** A sandbox or its image does not exist. */
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
