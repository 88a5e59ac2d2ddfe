import type { ErrorCode } from '../errors.js';

/**
 * The CLI's exit code for each berth error, read as `BerthError.exitCode` (docs/design.md §5): 2
 * when the caller's own input is wrong (flags, arguments, the config), 1 when a sandbox path it
 * named does not exist (as `cp` answers), and 125 for everything else: berth could not run the
 * call. 124 is not here: a command that timed out is a result with exit code 124, never an error.
 */
export const EXIT_CODE: Readonly<Record<ErrorCode, 1 | 2 | 125>> = {
  usage: 2,
  offset_out_of_range: 2,
  upload_incomplete: 2,
  config_invalid: 2,
  path_not_found: 1,
  policy_refused: 125,
  profile_forbidden: 125,
  host_backend_forbidden: 125,
  not_found: 125,
  job_not_found: 125,
  too_large: 125,
  tenant_limit: 125,
  disk_limit_exceeded: 125,
  unsupported: 125,
  job_start_failed: 125,
  backend_unavailable: 125,
  host_key_refused: 125,
  shutting_down: 125,
  shell_closed: 125,
  warden_closed: 125,
  session_closed: 125,
  timeout: 125,
  shell_start_failed: 125,
  sandbox_start_failed: 125,
  spawn_failed: 125,
  warden_gone: 125,
  kill_helper_failed: 125,
  transfer_failed: 125,
  staging_unsafe: 125,
  job_read_failed: 125,
  disk_measure_failed: 125,
  disk_image_failed: 125,
  helper_output_too_large: 125,
  docker_error: 125,
  invalid_ref: 125,
  image_pull_failed: 125,
  image_build_failed: 125,
  listen_failed: 125,
  internal: 125,
};
