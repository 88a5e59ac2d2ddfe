import { debugSink } from '../logging/debug-sink.js';

/** What a command needs from the process; passed in so commands stay thin and testable. */
export interface CliIo {
  env: NodeJS.ProcessEnv;
  cwd: string;
  out: (text: string) => void;
  err: (text: string) => void;
  /**
   * Aborts when stdout went away (its reader closed the pipe: `berth exec … | head -c 0`); `out`
   * writes nothing after that.
   */
  outClosed?: AbortSignal;
  /** Set when stdout is a terminal: its width (a live view redraws in place only there). */
  terminal?: { columns: number };
  /** The width of the terminal stderr writes to; undefined when stderr is no terminal (progress is then quiet). */
  errColumns?: number | undefined;
}

/** Exit code of a command whose output pipe was closed, as a shell reports a SIGPIPE death (128 + 13). */
export const CLOSED_PIPE_EXIT = 141;

export function processIo(): CliIo {
  const closed = new AbortController();
  // A write to a closed pipe fails with EPIPE as an 'error' event; unhandled, it would crash with a
  // stack trace. Any error on stdout means nobody reads it any more.
  process.stdout.on('error', () => closed.abort());
  process.stderr.on('error', () => undefined);
  return {
    env: process.env,
    cwd: process.cwd(),
    out: (t) => {
      if (!closed.signal.aborted) process.stdout.write(t);
    },
    err: (t) => {
      if (!process.stderr.destroyed) process.stderr.write(t);
    },
    outClosed: closed.signal,
    ...(process.stdout.isTTY ? { terminal: { columns: process.stdout.columns || 80 } } : {}),
    errColumns: process.stderr.isTTY ? process.stderr.columns || 80 : undefined,
  };
}

/** Writes one namespaced log line. */
export type CliLog = (namespace: string, message: string) => void;

/**
 * The log lines BERTH_DEBUG asks for (`*`, or a namespace prefix such as `berth:shell`), on
 * stderr; undefined when it asks for none.
 */
export function debugLog(io: CliIo): CliLog | undefined {
  return debugSink(io.env['BERTH_DEBUG'], io.err);
}
