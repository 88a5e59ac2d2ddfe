import { closeSync, constants, mkdtempSync, rmSync } from 'node:fs';
import { Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { makeFifos, openFifo } from '../plumbing/fifo-files.js';

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
    await makeFifos([path], '0600', `for a shell's stdin in ${dir}`);
    // Read-write: Linux opens a FIFO so at once, blocking (bash's `read` does not retry EAGAIN).
    // The shell closes this fd when it re-executes onto its own read-only end.
    const childFd = openFifo(path, constants.O_RDWR, opened);
    const writerFd = openFifo(path, constants.O_WRONLY | constants.O_NONBLOCK, opened);
    return { childFd, writer: new Socket({ fd: writerFd, readable: false, writable: true }) };
  } catch (err) {
    for (const fd of opened) closeSync(fd);
    throw err;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
