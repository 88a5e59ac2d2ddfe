import type { Readable } from 'node:stream';
import { BerthError } from '../../errors.js';
import { ProcessSandbox } from '../plumbing/process-sandbox.js';
import { guardedStream } from '../plumbing/tar-transfer.js';

/**
 * The plumbing over an SSH sandbox's spawn, with one piece of its own: the archive of the
 * account's home itself. Its parent, the home root, is 0711 (an account may pass through it to
 * its own home but not list the others), and tar opens its `-C` dir for reading; so the home is
 * archived from inside, its names renamed to `./<account>/...` as every archive names them.
 */
export class SshProcessSandbox extends ProcessSandbox {
  override async getArchive(path: string): Promise<Readable> {
    if (path !== this.homeDir) return super.getArchive(path);
    const base = path.slice(path.lastIndexOf('/') + 1);
    if (!/^[A-Za-z0-9._-]+$/.test(base)) throw new BerthError('internal', `home ${path} has a name berth never makes`);
    // S: symlink targets keep what the agent wrote (they are refused on the way out anyway).
    const rename = `s/^\\./.\\/${base}/S`;
    const proc = await this.spawn(['tar', '-c', '-f', '-', `--transform=${rename}`, '-C', path, '.'], { env: {}, stdin: false });
    return guardedStream(proc, (code, text) => new BerthError(
      'transfer_failed',
      `reading ${path} in ${this.where} failed (tar exit ${code ?? 'unknown'}): ${text.trim().split('\n').slice(-3).join('; ') || 'no message'}`,
    ));
  }
}
