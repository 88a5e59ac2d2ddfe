/*
 * metav1.Status bodies as the API server and the kubelet write them (field order and omitted
 * empty fields as Go's encoding/json produces them).
 */

export interface StatusBody {
  kind?: 'Status';
  apiVersion?: 'v1';
  metadata: Record<string, never>;
  status: 'Success' | 'Failure';
  message?: string;
  reason?: string;
  details?: { name?: string; kind?: string; causes?: { reason?: string; message?: string; field?: string }[] };
  code?: number;
}

/** The error body of a failed API request (`kind: Status`, with the HTTP code). */
export function apiError(code: number, reason: string, message: string, details?: StatusBody['details']): StatusBody {
  const body: StatusBody = { kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Failure', message, reason };
  if (details !== undefined) body.details = details;
  body.code = code;
  return body;
}

export const notFound = (resource: string, name: string): StatusBody =>
  apiError(404, 'NotFound', `${resource} "${name}" not found`, { name, kind: resource });

export const alreadyExists = (resource: string, name: string): StatusBody =>
  apiError(409, 'AlreadyExists', `${resource} "${name}" already exists`, { name, kind: resource });

/**
 * The status frame of an exec (channel 3 on v4/v5), as the kubelet's `ServeExec` writes it: a
 * bare Success, or a NonZeroExitCode failure whose `ExitCode` cause carries the code. The
 * message names the command, as containerd's exec error does.
 */
export function execStatus(argv: readonly string[], exitCode: number): StatusBody {
  if (exitCode === 0) return { metadata: {}, status: 'Success' };
  return {
    metadata: {},
    status: 'Failure',
    message: `command terminated with non-zero exit code: error executing command [${argv.join(' ')}], exit code ${exitCode}`,
    reason: 'NonZeroExitCode',
    details: { causes: [{ reason: 'ExitCode', message: String(exitCode) }] },
  };
}

/** The status frame when the runtime could not run the command at all (an InternalError). */
export function execInternalError(message: string): StatusBody {
  const text = `error executing command in container: ${message}`;
  return { metadata: {}, status: 'Failure', message: `Internal error occurred: ${text}`, reason: 'InternalError', details: { causes: [{ message: text }] }, code: 500 };
}
