/** Where log lines go: one namespaced line at a time (`berth:docker`, `created 1a2b3c4d5e6f`). */
export type LogSink = (namespace: string, message: string) => void;

/** The sandbox a line is about: its key and a short ref (container id, directory name). */
export interface LogContext {
  key?: string | undefined;
  ref?: string | undefined;
}

/**
 * One logger, passed down from the composition root: a namespace (`berth:docker`, `berth:shell`,
 * `berth:broker`, ...) and, on lines about a sandbox, its key and a short ref. Callers never hand
 * it a secret value (env values, file contents): lines name things, never what they hold.
 *
 * @example
 * const log = new Logger(sink).child('berth:docker').with({ key: 'session:s1', ref: container.id });
 * log.debug('started'); // sink('berth:docker', 'session:s1 1a2b3c4d5e6f: started')
 */
export class Logger {
  private readonly prefix: string;

  constructor(
    private readonly sink: LogSink | undefined,
    readonly namespace = 'berth',
    private readonly context: Readonly<LogContext> = {},
  ) {
    const parts = [context.key, context.ref === undefined ? undefined : shortRef(context.ref)].filter((p) => p !== undefined && p !== '');
    this.prefix = parts.length === 0 ? '' : `${parts.join(' ')}: `;
  }

  /** A logger that writes nowhere. */
  static silent(): Logger {
    return new Logger(undefined);
  }

  /** False when lines go nowhere (skip building expensive ones). */
  get enabled(): boolean {
    return this.sink !== undefined;
  }

  /** The same sink under another namespace (`berth:shell`); the sandbox context is kept. */
  child(namespace: string): Logger {
    return new Logger(this.sink, namespace, this.context);
  }

  /** The same namespace, about one sandbox. */
  with(context: LogContext): Logger {
    return new Logger(this.sink, this.namespace, { ...this.context, ...context });
  }

  debug(message: string): void {
    if (this.sink === undefined) return;
    try {
      this.sink(this.namespace, `${this.prefix}${message}`);
    } catch {
      // A sink that fails (a closed stderr) never fails the call that logged.
    }
  }
}

/** A container id as `docker ps` shows it (12 hex), a directory by its name; anything else as is. */
export function shortRef(ref: string): string {
  if (/^[0-9a-f]{64}$/.test(ref)) return ref.slice(0, 12);
  const slash = ref.replace(/\/+$/, '').lastIndexOf('/');
  return slash >= 0 ? ref.slice(slash + 1) : ref;
}
