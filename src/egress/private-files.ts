import { closeSync, constants, fstatSync, linkSync, lstatSync, mkdirSync, openSync, readFileSync, unlinkSync, writeSync, chmodSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { ConfigError } from '../errors.js';

/*
 * The egress dir holds the installation's CA key and placeholder secret: nobody but berth's own
 * user may read them. A file berth finds readable by others is an error, not something to fix
 * quietly, because whoever could read it may already have a copy of the key.
 */

/** Creates `dir` 0700 if needed; an existing dir of berth's user loses its group and other bits. */
export function preparePrivateDir(dir: string): void {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const st = lstatSync(dir);
  if (!st.isDirectory()) throw new ConfigError(`egress dir "${dir}" is not a directory; remove it so berth can create it`);
  if (st.uid !== process.getuid?.()) throw new ConfigError(`egress dir "${dir}" belongs to uid ${st.uid}, not to berth's user; chown it to berth's user or remove it`);
  if ((st.mode & 0o077) !== 0) chmodSync(dir, st.mode & 0o700);
}

/**
 * The content of a private file, or undefined when it does not exist. Symlinks are refused, and
 * so is a file others could read or that another user owns, naming the fix.
 */
export function readPrivateFile(path: string): Buffer | undefined {
  let fd: number;
  try {
    fd = openSync(path, constants.O_RDONLY | constants.O_NOFOLLOW);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') return undefined;
    if (code === 'ELOOP') throw new ConfigError(`"${path}" is a symlink; berth reads its egress keys only from regular files: remove the link`);
    throw e;
  }
  try {
    const st = fstatSync(fd);
    if (!st.isFile()) throw new ConfigError(`"${path}" is not a regular file; remove it so berth can create it`);
    if (st.uid !== process.getuid?.()) throw new ConfigError(`"${path}" belongs to uid ${st.uid}, not to berth's user; chown it to berth's user`);
    if ((st.mode & 0o077) !== 0) {
      throw new ConfigError(`"${path}" is readable by others (mode ${(st.mode & 0o777).toString(8)}): run chmod 600 "${path}", or remove it to make a new one if others may have read it`);
    }
    return readFileSync(fd);
  } finally {
    closeSync(fd);
  }
}

/**
 * Writes `content` to `path` (0600) unless the file exists: written to a temp name, then hard
 * linked into place, so a reader never sees half a file and two processes creating it at once
 * agree on one. Returns false when another writer got there first (read theirs).
 */
export function createPrivateFileOnce(path: string, content: string | Buffer): boolean {
  const tmp = `${path}.${randomBytes(6).toString('hex')}.tmp`;
  const fd = openSync(tmp, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, 0o600);
  try {
    writeSync(fd, typeof content === 'string' ? Buffer.from(content, 'utf8') : content);
  } finally {
    closeSync(fd);
  }
  try {
    linkSync(tmp, path);
    return true;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'EEXIST') return false;
    throw e;
  } finally {
    unlinkSync(tmp);
  }
}
