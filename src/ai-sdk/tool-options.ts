import { UsageError } from '../errors.js';

export interface BerthToolsOptions {
  /** The longest timeout the model may ask for one command, in seconds (default 600). */
  maxTimeoutSeconds?: number;
  /** The largest file `read_file` returns, in bytes (default 256 KiB); larger is an error the model reads. */
  maxReadBytes?: number;
  /** The most job output one `job_read` returns, in bytes (default 64 KiB; the next read goes on from `nextOffset`). */
  maxJobReadBytes?: number;
}

export type ToolLimits = Required<BerthToolsOptions>;

const DEFAULTS: ToolLimits = { maxTimeoutSeconds: 600, maxReadBytes: 256 * 1024, maxJobReadBytes: 64 * 1024 };

/** The options with their defaults; a value that is not a positive whole number is a usage error naming it. */
export function toolLimits(opts: BerthToolsOptions = {}): ToolLimits {
  const limits = { ...DEFAULTS };
  for (const key of Object.keys(DEFAULTS) as (keyof ToolLimits)[]) {
    const value = opts[key];
    if (value === undefined) continue;
    if (!Number.isSafeInteger(value) || value <= 0) {
      throw new UsageError(`berthTools option ${key} must be a positive whole number, got ${String(value)}`);
    }
    limits[key] = value;
  }
  return limits;
}
