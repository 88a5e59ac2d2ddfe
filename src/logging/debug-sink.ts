import type { LogSink } from './logger.js';

/**
 * The lines `BERTH_DEBUG` asks for: `*` for all, or namespace prefixes (`berth:shell`,
 * `berth:docker,berth:broker`). Each line is `<namespace> <message>`. Undefined when it asks for none.
 *
 * @example
 * const sink = debugSink(process.env.BERTH_DEBUG, (line) => process.stderr.write(line));
 */
export function debugSink(pattern: string | undefined, write: (line: string) => void): LogSink | undefined {
  const wanted = (pattern ?? '').split(',').map((p) => p.trim()).filter((p) => p !== '');
  if (wanted.length === 0) return undefined;
  return (namespace, message) => {
    if (wanted.some((p) => p === '*' || namespace.startsWith(p))) write(`${namespace} ${message}\n`);
  };
}
