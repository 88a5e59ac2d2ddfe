import { BerthError } from '../errors.js';

/** A transfer over its size cap. Names the cap and the setting that raises it. Exit 125. */
export class FileTooLargeError extends BerthError {
  readonly limitBytes: number;

  constructor(what: string, limitBytes: number, setting: string, fix = `raise ${setting} in the config, or transfer less`) {
    super('too_large', `${what} is larger than the cap of ${limitBytes} bytes (${setting}); ${fix}`);
    this.limitBytes = limitBytes;
  }
}

/** The sandbox path does not exist (or a symlink on it points nowhere). Exit 1, like cp. */
export class PathNotFoundError extends BerthError {
  constructor(message: string) {
    super('path_not_found', message);
  }
}
