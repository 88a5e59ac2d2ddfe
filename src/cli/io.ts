import { envLogSink, type LogThreshold } from '../logging/log-sink.js';
import type { LogSink } from '../logging/logger.js';

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
  /** Set when stdout is a terminal: its size now (a live view redraws in place only there, and fits it). */
  terminal?: { columns: number; rows?: number };
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
    ...(process.stdout.isTTY ? { terminal: { get columns() { return process.stdout.columns || 80; }, get rows() { return process.stdout.rows || 24; } } } : {}),
    errColumns: process.stderr.isTTY ? process.stderr.columns || 80 : undefined,
  };
}

/** Writes one namespaced log line (`LogSink`: a debug line unless a record says otherwise). */
export type CliLog = LogSink;

/**
 * The log lines BERTH_LOG_LEVEL (default `fallback`: `warn` for a command, `info` for a server)
 * and BERTH_DEBUG (`*`, or namespace prefixes such as `berth:shell`) ask for, on stderr: JSON
 * lines unless stderr is a terminal. Undefined when they ask for none.
 *
 * @throws ConfigError when BERTH_LOG_LEVEL names no level.
 */
export function cliLog(io: CliIo, fallback: LogThreshold = 'warn'): CliLog | undefined {
  return envLogSink(io.env, fallback, io.errColumns !== undefined, io.err);
}
