import { ConfigError } from '../../src/errors.js';
import { parseConfig, type ParseOptions } from '../../src/setup/parse-config.js';

/** The error message of parsing `raw` as `berth.yaml`, or '' when it parses. */
export function configProblem(raw: unknown): string {
  try {
    parseConfig(raw, 'berth.yaml');
    return '';
  } catch (e) {
    return (e as Error).message;
  }
}

/** The ConfigError message of parsing `raw`; any other outcome (it parses, another error) fails the test. */
export function configErrorOf(raw: unknown, opts: ParseOptions = {}): string {
  try {
    parseConfig(raw, undefined, opts);
  } catch (err) {
    if (err instanceof ConfigError) return err.message;
    throw err;
  }
  throw new Error('expected a ConfigError');
}
