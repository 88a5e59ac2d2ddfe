import { execFile } from 'node:child_process';
import { closeSync, constants, fstatSync, mkdtempSync, openSync, rmSync } from 'node:fs';
import { Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BerthError } from '../../errors.js';

const MKFIFO_TIMEOUT_MS = 10_000;

/** A FIFO opened at both ends and already unlinked: the child's end (an fd to pass as its stdin) and berth's writer. */
export interface FifoStdin {
  /** Blocking fd for the child's stdin; close it in berth once the child has it. */
  childFd: number;
  /** berth's end, non-blocking, for writing. */
  writer: Socket;
}

/**
 * stdin for a host shell as a real pipe. Node gives a child's piped stdio as a socketpair, and a
 * socket cannot be reopened through /dev/fd: the shell protocol then redirects every command's
 * stdin from /dev/null (a dozen syscalls per command). A FIFO is a pipe: the shell re-executes
 * itself onto it once and commands run with nothing to redirect. Made in a fresh private dir
 * (mkdtemp, 0700) and unlinked once both ends are open, so no other process can open it by name;
 * O_NOFOLLOW and the FIFO check refuse anything planted there instead.
 */
export async function openFifoStdin(): Promise<FifoStdin> {
  const dir = mkdtempSync(join(tmpdir(), 'berth-stdin-'));
  const path = join(dir, 'stdin');
  const opened: number[] = [];
  try {
    // Node has no mkfifo(3): one short helper per shell start.
    await new Promise<void>((resolve, reject) => {
      execFile('mkfifo', ['-m', '0600', '--', path], { timeout: MKFIFO_TIMEOUT_MS }, (err, _out, stderr) => {
        if (err) reject(new BerthError('spawn_failed', `could not make the shell's stdin FIFO in ${dir}: ${stderr.trim() || err.message}; is coreutils' mkfifo on PATH?`));
        else resolve();
      });
    });
    const open = (flags: number): number => {
      const fd = openSync(path, flags | constants.O_NOFOLLOW);
      opened.push(fd);
      if (!fstatSync(fd).isFIFO()) throw new BerthError('spawn_failed', `${path} is not the FIFO berth made`);
      return fd;
    };
    // Read-write: Linux opens a FIFO so at once, blocking (bash's `read` does not retry EAGAIN).
    // The shell closes this fd when it re-executes onto its own read-only end.
    const childFd = open(constants.O_RDWR);
    const writerFd = open(constants.O_WRONLY | constants.O_NONBLOCK);
    return { childFd, writer: new Socket({ fd: writerFd, readable: false, writable: true }) };
  } catch (err) {
    for (const fd of opened) closeSync(fd);
    throw err;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
