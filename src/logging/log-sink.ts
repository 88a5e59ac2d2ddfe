import { ConfigError } from '../errors.js';
import { fieldsText, LOG_LEVELS, type LogLevel, type LogRecord, type LogSink } from './logger.js';

/** The lowest level written, or `silent` for none (BERTH_DEBUG's namespaces still get every line). */
export type LogThreshold = LogLevel | 'silent';

export interface LogSinkOptions {
  threshold: LogThreshold;
  /** BERTH_DEBUG: `*` for all, or namespace prefixes (`berth:shell,berth:ssh`) whose every line is written. */
  debug?: string | undefined;
  /** One JSON object per line (stderr is no terminal), else a readable line. */
  json: boolean;
  write: (line: string) => void;
  now?: () => Date;
}

/**
 * Lines at or above the threshold, and every line of the namespaces BERTH_DEBUG names; undefined
 * when none can pass. A line handed without a record (`sink(ns, text)`) is a debug line.
 *
 * @example
 * const sink = logSink({ threshold: 'info', json: true, write: (l) => process.stderr.write(l) });
 * new Logger(sink, 'berth:server').info('listening', { port: 7878 });
 * // {"time":"…","level":"info","component":"berth:server","msg":"listening","port":7878}
 */
export function logSink(opts: LogSinkOptions): LogSink | undefined {
  const debug = (opts.debug ?? '').split(',').map((p) => p.trim()).filter((p) => p !== '');
  if (opts.threshold === 'silent' && debug.length === 0) return undefined;
  const lowest = opts.threshold === 'silent' ? LOG_LEVELS.length : LOG_LEVELS.indexOf(opts.threshold);
  const debugged = (ns: string): boolean => debug.some((p) => p === '*' || ns.startsWith(p));
  const wants = (ns: string, level: LogLevel): boolean => LOG_LEVELS.indexOf(level) >= lowest || debugged(ns);
  const now = opts.now ?? ((): Date => new Date());
  const format = opts.json ? jsonLine : textLine;
  const sink: LogSink = (namespace, message, record) => {
    const r = record ?? { level: 'debug', component: namespace, msg: message };
    if (wants(namespace, r.level)) opts.write(format(now(), r));
  };
  sink.wants = wants;
  return sink;
}

/**
 * The sink the environment asks for: BERTH_LOG_LEVEL (debug|info|warn|error|silent, else
 * `fallback`) and BERTH_DEBUG, JSON unless `terminal`.
 *
 * @throws ConfigError when BERTH_LOG_LEVEL names no level.
 */
export function envLogSink(env: NodeJS.ProcessEnv, fallback: LogThreshold, terminal: boolean, write: (line: string) => void): LogSink | undefined {
  return logSink({ threshold: thresholdOf(env['BERTH_LOG_LEVEL'], fallback), debug: env['BERTH_DEBUG'], json: !terminal, write });
}

function thresholdOf(value: string | undefined, fallback: LogThreshold): LogThreshold {
  if (value === undefined || value.trim() === '') return fallback;
  const v = value.trim().toLowerCase();
  if (v === 'silent' || (LOG_LEVELS as readonly string[]).includes(v)) return v as LogThreshold;
  throw new ConfigError(`BERTH_LOG_LEVEL "${value}" is not a level; set it to debug, info, warn, error or silent`);
}

function jsonLine(time: Date, r: LogRecord): string {
  const core = { time: time.toISOString(), level: r.level, component: r.component, msg: r.msg };
  // The core keys come first and win over a field of the same name.
  const line = Object.assign({ ...core }, r.sandbox === undefined ? {} : { sandbox: r.sandbox }, r.ref === undefined ? {} : { ref: r.ref }, r.fields, core);
  return `${JSON.stringify(line)}\n`;
}

function textLine(time: Date, r: LogRecord): string {
  const about = [r.sandbox, r.ref].filter((p) => p !== undefined && p !== '').join(' ');
  const clock = time.toISOString().slice(11, 23);
  return `${clock} ${r.level.toUpperCase().padEnd(5)} ${r.component} ${about === '' ? '' : `${about}: `}${r.msg}${fieldsText(r.fields)}\n`;
}
