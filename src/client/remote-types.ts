import type { z } from 'zod';
import type { Binding, Closed, ExecResult, Export, JobRead, JobStarted, JobSummary, Written } from '../server/response-schemas.js';
import type { ScopeFields } from '../server/schemas.js';

/*
 * The client's types are the server's own schemas (response-schemas.ts for answers, schemas.ts for
 * the scope a request carries): a field the server adds or drops changes them, and the compiler
 * points at each use.
 */

/** The call scope a remote session carries: everything but the tenant, which is the token's. */
export type RemoteScope = Readonly<ScopeFields>;

/** A command's result over HTTP: the library's, without the host path of spilled output. */
export type RemoteExecResult = z.output<typeof ExecResult>;
/** The binding of a scope over HTTP: the library's, with `mounted` in place of the host path. */
export type RemoteBinding = z.output<typeof Binding>;
export type RemoteCloseResult = z.output<typeof Closed>;
export type RemoteExport = z.output<typeof Export>;
export type RemoteJobRead = z.output<typeof JobRead>;
export type RemoteJobStarted = z.output<typeof JobStarted>;
export type RemoteJobSummary = z.output<typeof JobSummary>;
export type RemoteWritten = z.output<typeof Written>;

export interface RemoteExecOptions {
  timeoutSeconds?: number;
  workdir?: string;
  /** Text (bytes that are not UTF-8 are refused: upload them as a file instead). */
  stdin?: string | Uint8Array;
  /** Streams the output: each chunk in arrival order, before the result resolves. */
  onChunk?: (stream: 'stdout' | 'stderr', chunk: string) => void;
  /**
   * Cancels the command: its connection closes and the server kills its process tree as on a
   * timeout. The call rejects with the signal's reason (the server's result, exit code 130, is
   * in its audit).
   */
  signal?: AbortSignal;
}
