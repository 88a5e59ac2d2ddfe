/**
 * One error base for everything berth reports. `code` is stable and machine-readable;
 * the message names the thing, the limit and the fix. Formatting for people happens once,
 * at the edge (CLI, HTTP, MCP).
 */
export class BerthError extends Error {
  readonly code: string;
  /** Exit code the CLI uses for this error. */
  readonly exitCode: number;

  constructor(code: string, message: string, options?: { cause?: unknown; exitCode?: number }) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.code = code;
    this.exitCode = options?.exitCode ?? 125;
  }
}

/** Config that is unknown, contradictory or cannot be honoured. CLI exit 2. */
export class ConfigError extends BerthError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('config_invalid', message, { ...options, exitCode: 2 });
  }
}

/** Bad arguments from the caller (CLI flags, API input). CLI exit 2. */
export class UsageError extends BerthError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('usage', message, { ...options, exitCode: 2 });
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
