import { BackendUnavailableError, BerthError } from '../../errors.js';

/** Errors of starting a process (not of what it then does), by errno code, with the fix. */
const SPAWN_ERRORS: Readonly<Record<string, { what: string; fix: string }>> = {
  ENOENT: { what: 'was not found (no such program, or no such working directory)', fix: 'install it in the sandbox (or on the host, for local) and check PATH and the working directory' },
  EACCES: { what: 'may not be run (permission denied)', fix: 'check the program\'s mode and the permissions of its directory and of the working directory' },
  EPERM: { what: 'may not be run (operation not permitted)', fix: 'check the user berth runs as and the sandbox\'s limits' },
  ENOTDIR: { what: 'could not start: a part of its path or working directory is not a directory', fix: 'check the working directory' },
  EAGAIN: { what: 'could not start: no process could be created (process limit reached)', fix: 'end processes or raise the limit, then retry' },
  EMFILE: { what: 'could not start: berth has too many files open', fix: 'raise the open-file limit (ulimit -n) of berth\'s process, or close sessions' },
  ENFILE: { what: 'could not start: the system has too many files open', fix: 'close files or raise the system limit, then retry' },
  ENOMEM: { what: 'could not start: out of memory', fix: 'free memory, then retry' },
};

/**
 * The one translator for a process that could not be started (`spawn` failed before the program
 * ran): a `BackendUnavailableError` naming the program, where, the errno and the fix. berth's own
 * errors pass through; anything else keeps its message.
 *
 * @example
 * fromSpawnError(Object.assign(new Error('spawn tar ENOENT'), { code: 'ENOENT' }), 'tar', 'sandbox s1')
 * // BackendUnavailableError: could not start "tar" in sandbox s1: it was not found (...) (ENOENT); install it ...
 */
export function fromSpawnError(err: unknown, program: string, where: string): BerthError {
  if (err instanceof BerthError) return err;
  const code = typeof err === 'object' && err !== null && typeof (err as { code?: unknown }).code === 'string' ? (err as { code: string }).code : undefined;
  const known = code === undefined ? undefined : SPAWN_ERRORS[code];
  const message = err instanceof Error ? err.message : String(err);
  if (known === undefined) {
    return new BackendUnavailableError(`could not start ${JSON.stringify(program)} in ${where}: ${message}`, { cause: err });
  }
  return new BackendUnavailableError(`could not start ${JSON.stringify(program)} in ${where}: it ${known.what} (${code}); ${known.fix}`, { cause: err });
}
