import type { ErrorCode } from '../../errors.js';

/**
 * How a berth error thrown while a tool runs reaches an MCP client:
 * - `result`: a tool result with `isError: true` whose text the agent reads and acts on.
 * - `invalid_params`: a JSON-RPC error -32602, as for a schema violation.
 * - `internal_error`: a JSON-RPC error -32603, as for anything that is no berth error (a bug).
 *
 * Every code is a result: a tool's arguments were checked by its schema before it ran (a
 * violation is -32602 there), so what it throws is what happened while it ran, which the agent
 * can read and act on: refused, not found, over a bound, a backend down, the session closed, or
 * an argument only the call itself could judge (a directory given to read_file, a NUL byte in a
 * command, an offset past a job's output, whose answer names the size to read from).
 */
export type McpErrorKind = 'invalid_params' | 'internal_error' | 'result';

export const MCP_ERROR_KIND: Readonly<Record<ErrorCode, McpErrorKind>> = {
  usage: 'result',
  offset_out_of_range: 'result',
  upload_incomplete: 'result',
  config_invalid: 'result',
  policy_refused: 'result',
  profile_forbidden: 'result',
  host_backend_forbidden: 'result',
  not_found: 'result',
  path_not_found: 'result',
  job_not_found: 'result',
  too_large: 'result',
  tenant_limit: 'result',
  disk_limit_exceeded: 'result',
  unsupported: 'result',
  job_start_failed: 'result',
  backend_unavailable: 'result',
  host_key_refused: 'result',
  shutting_down: 'result',
  shell_closed: 'result',
  warden_closed: 'result',
  session_closed: 'result',
  timeout: 'result',
  shell_start_failed: 'result',
  sandbox_start_failed: 'result',
  spawn_failed: 'result',
  warden_gone: 'result',
  kill_helper_failed: 'result',
  transfer_failed: 'result',
  staging_unsafe: 'result',
  job_read_failed: 'result',
  disk_measure_failed: 'result',
  disk_image_failed: 'result',
  helper_output_too_large: 'result',
  docker_error: 'result',
  invalid_ref: 'result',
  image_pull_failed: 'result',
  image_build_failed: 'result',
  listen_failed: 'result',
  internal: 'result',
};
