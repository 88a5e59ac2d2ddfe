/**
 * berth's own small logger rather than pino: berth needs four levels, a namespace and one JSON
 * line per record, and its hot path calls `debug` on every command, which here costs one boolean
 * test when debug is off (no dependency, no worker thread, nothing to flush at exit).
 */

/** From least to most severe; a threshold lets through its own level and those after it. */
export const LOG_LEVELS = ['debug', 'info', 'warn', 'error'] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];

/** What a line says beyond its message: names, numbers, codes; never a secret or a command text. */
export type LogFields = Readonly<Record<string, string | number | boolean | undefined>>;

/** One line as a structured record: what a levelled sink writes (`log-sink.ts`). */
export interface LogRecord {
  level: LogLevel;
  /** The namespace: `berth:server`, `berth:ssh`, ... */
  component: string;
  msg: string;
  /** The sandbox the line is about: its key and short ref. */
  sandbox?: string | undefined;
  ref?: string | undefined;
  fields?: LogFields | undefined;
}

/**
 * Where log lines go. `message` is the line as one string (`session:s1 1a2b3c4d5e6f: started`),
 * for sinks that only collect text; `record` is the same line with its level and fields. A sink
 * that sets `wants` is asked once per logger which levels of a namespace it writes, so a line it
 * would drop is never built.
 */
export interface LogSink {
  (namespace: string, message: string, record?: LogRecord): void;
  wants?: (namespace: string, level: LogLevel) => boolean;
}

/** The sandbox a line is about: its key and a short ref (container id, directory name). */
export interface LogContext {
  key?: string | undefined;
  ref?: string | undefined;
}

/**
 * One logger, passed down from the composition root: a namespace (`berth:docker`, `berth:shell`,
 * `berth:broker`, ...) and, on lines about a sandbox, its key and a short ref. Callers never hand
 * it a secret value (env values, file contents, tokens, command texts): lines name things, never
 * what they hold.
 *
 * @example
 * const log = new Logger(sink).child('berth:docker').with({ key: 'session:s1', ref: container.id });
 * log.debug('started'); // sink('berth:docker', 'session:s1 1a2b3c4d5e6f: started', { level: 'debug', ... })
 * log.warn('engine slow', { ms: 812 });
 */
export class Logger {
  private readonly prefix: string;
  private readonly ref: string | undefined;
  private readonly on: Readonly<Record<LogLevel, boolean>>;

  constructor(
    private readonly sink: LogSink | undefined,
    readonly namespace = 'berth',
    private readonly context: Readonly<LogContext> = {},
  ) {
    this.ref = context.ref === undefined || context.ref === '' ? undefined : shortRef(context.ref);
    const parts = [context.key, this.ref].filter((p) => p !== undefined && p !== '');
    this.prefix = parts.length === 0 ? '' : `${parts.join(' ')}: `;
    const wants = (level: LogLevel): boolean => sink !== undefined && (sink.wants?.(namespace, level) ?? true);
    this.on = { debug: wants('debug'), info: wants('info'), warn: wants('warn'), error: wants('error') };
  }

  /** A logger that writes nowhere. */
  static silent(): Logger {
    return new Logger(undefined);
  }

  /** False when debug lines go nowhere (skip building expensive ones). */
  get enabled(): boolean {
    return this.on.debug;
  }

  /** Whether lines of `level` are written. */
  wants(level: LogLevel): boolean {
    return this.on[level];
  }

  /** The same sink under another namespace (`berth:shell`); the sandbox context is kept. */
  child(namespace: string): Logger {
    return new Logger(this.sink, namespace, this.context);
  }

  /** The same namespace, about one sandbox. */
  with(context: LogContext): Logger {
    return new Logger(this.sink, this.namespace, { ...this.context, ...context });
  }

  debug(message: string, fields?: LogFields): void {
    if (this.on.debug) this.write('debug', message, fields);
  }

  info(message: string, fields?: LogFields): void {
    if (this.on.info) this.write('info', message, fields);
  }

  warn(message: string, fields?: LogFields): void {
    if (this.on.warn) this.write('warn', message, fields);
  }

  error(message: string, fields?: LogFields): void {
    if (this.on.error) this.write('error', message, fields);
  }

  /** A line at `level`. */
  log(level: LogLevel, message: string, fields?: LogFields): void {
    if (this.on[level]) this.write(level, message, fields);
  }

  private write(level: LogLevel, msg: string, fields: LogFields | undefined): void {
    const record: LogRecord = { level, component: this.namespace, msg, sandbox: this.context.key, ref: this.ref, fields };
    try {
      this.sink?.(this.namespace, `${this.prefix}${msg}${fieldsText(fields)}`, record);
    } catch {
      // A sink that fails (a closed stderr) never fails the call that logged.
    }
  }
}

/** ` a=1 b="two words"`: fields as a text sink shows them (a stack on the lines after). */
export function fieldsText(fields: LogFields | undefined): string {
  if (fields === undefined) return '';
  let text = '';
  let stack = '';
  for (const [k, v] of Object.entries(fields)) {
    if (v === undefined) continue;
    if (k === 'stack') stack = `\n${String(v)}`;
    else text += ` ${k}=${typeof v === 'string' && !/^[^\s"=]+$/.test(v) ? JSON.stringify(v) : String(v)}`;
  }
  return text + stack;
}

/** A container id as `docker ps` shows it (12 hex), a directory by its name; anything else as is. */
function shortRef(ref: string): string {
  if (/^[0-9a-f]{64}$/.test(ref)) return ref.slice(0, 12);
  const slash = ref.replace(/\/+$/, '').lastIndexOf('/');
  return slash >= 0 ? ref.slice(slash + 1) : ref;
}
