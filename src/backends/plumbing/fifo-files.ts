import { execFile } from 'node:child_process';
import { constants, fstatSync, openSync } from 'node:fs';
import { BerthError } from '../../errors.js';

const MKFIFO_TIMEOUT_MS = 10_000;

/** Makes FIFOs at `paths` with `mode` (octal text), one `mkfifo` run for all: Node has no mkfifo(3). */
export function makeFifos(paths: readonly string[], mode: string, where: string): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    execFile('mkfifo', ['-m', mode, '--', ...paths], { timeout: MKFIFO_TIMEOUT_MS }, (err, _out, stderr) => {
      if (err) reject(new BerthError('spawn_failed', `could not make FIFOs ${where}: ${stderr.trim() || err.message}; is coreutils' mkfifo on PATH?`));
      else resolve();
    });
  });
}

/**
 * Opens a FIFO berth made, never what was planted in its place: O_NOFOLLOW refuses a link, and
 * anything but a FIFO is closed and refused. `opened` collects the fd (for the caller's cleanup).
 */
export function openFifo(path: string, flags: number, opened: number[]): number {
  const fd = openSync(path, flags | constants.O_NOFOLLOW);
  opened.push(fd);
  if (!fstatSync(fd).isFIFO()) throw new BerthError('spawn_failed', `${path} is not the FIFO berth made`);
  return fd;
}
