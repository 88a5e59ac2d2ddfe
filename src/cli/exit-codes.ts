import { ERROR_CATEGORY, type ErrorCategory, type ErrorCode } from '../errors.js';

/** What the CLI ends with besides a command's own exit code (docs/design.md §5). */
export type ErrorExitCode = 1 | 2 | 125;

/**
 * The exit code of each error category: 2 when the caller's own input or the config is wrong, 125
 * for everything else: berth could not run the call. 124 is not here: a command that timed out is
 * a result with exit code 124, never an error.
 */
const EXIT_OF_CATEGORY: Readonly<Record<ErrorCategory, ErrorExitCode>> = {
  input: 2,
  config: 2,
  refused: 125,
  not_found: 125,
  bound: 125,
  unsupported: 125,
  gone: 125,
  fault: 125,
  bug: 125,
};

/** The CLI's exit code for a berth error: its category's, except a sandbox path that does not exist, which is 1 (as `cp` answers). */
export function exitCodeOf(code: ErrorCode): ErrorExitCode {
  return code === 'path_not_found' ? 1 : EXIT_OF_CATEGORY[ERROR_CATEGORY[code]];
}
