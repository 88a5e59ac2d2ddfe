import { isBerthError } from '../errors.js';

/** What the model reads when a call failed in a way it can act on: the error's code and its one-line message. */
export interface ToolFailure {
  error: { code: string; message: string };
}

/**
 * Runs one tool call. A berth error (a missing file, a refused path, a job that is not this
 * session's) is an answer the model reads and can act on; anything else is a bug, thrown for the
 * SDK to report.
 */
export async function answer<T>(call: () => Promise<T>): Promise<T | ToolFailure> {
  try {
    return await call();
  } catch (err) {
    if (isBerthError(err)) return { error: { code: err.code, message: err.message } };
    throw err;
  }
}
