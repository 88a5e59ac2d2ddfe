import { constants } from 'node:fs';
import { lstat, open, readdir, readlink } from 'node:fs/promises';
import { spawn } from 'node:child_process';
import path from 'node:path';
import { BerthError, PolicyRefusedError } from '../../errors.js';
import type { ForbiddenValue } from '../backend.js';
import { MIN_REDACT_LENGTH } from '../../kit/redaction.js';

/** Where a forbidden value was found: the variable, and the file as the sandbox names it. */
export interface ForbiddenHit {
  name: string;
  sandboxPath: string;
}

/** A host tree a snapshot holds, and the in-sandbox dir it was (`/root` for a copied home). */
export interface ScannedTree {
  hostDir: string;
  sandboxDir: string;
}

/**
 * The first file under `trees` that holds one of `forbidden` (in its bytes, its name, or a link's
 * target), or undefined. File contents are searched by `grep -F` (fixed strings, read from its
 * stdin, never an argv; ~10x faster than a search in this process), which skips links it meets
 * and never opens a FIFO or device (`-D skip`), so a planted one cannot hang the scan or lead it
 * out of the tree; a value with a newline in it (grep's pattern separator) is searched here, in
 * chunks that overlap by the longest value. Values shorter than the redactor's minimum are not
 * looked for, as output redaction ignores them.
 */
export async function findForbidden(trees: readonly ScannedTree[], forbidden: readonly ForbiddenValue[]): Promise<ForbiddenHit | undefined> {
  const needles = forbidden
    .filter((f) => f.value.length >= MIN_REDACT_LENGTH)
    .map((f) => ({ name: f.name, bytes: Buffer.from(f.value, 'utf8') }));
  if (needles.length === 0) return undefined;
  const multiline = needles.filter((n) => n.bytes.includes(0x0a));
  const grepped = needles.filter((n) => !n.bytes.includes(0x0a));
  for (const tree of trees) {
    const hit = await scanDir(tree.hostDir, tree.sandboxDir, needles, multiline);
    if (hit !== undefined) return hit;
    for (const file of grepped.length === 0 ? [] : await grepFiles(tree.hostDir, grepped)) {
      const name = await needleInFile(file, grepped);
      if (name !== undefined) return { name, sandboxPath: path.posix.join(tree.sandboxDir, path.relative(tree.hostDir, file)) };
    }
  }
  return undefined;
}

interface Needle {
  name: string;
  bytes: Buffer;
}

/** Names and link targets under `hostDir` against `needles`; file contents against `inFiles` only. */
async function scanDir(hostDir: string, sandboxDir: string, needles: readonly Needle[], inFiles: readonly Needle[]): Promise<ForbiddenHit | undefined> {
  const entries = await readdir(hostDir).catch((err: NodeJS.ErrnoException) => {
    if (err.code === 'ENOENT') return [];
    throw err;
  });
  for (const entry of entries) {
    const hostPath = path.join(hostDir, entry);
    const sandboxPath = path.posix.join(sandboxDir, entry);
    const inName = needleIn(Buffer.from(entry, 'utf8'), needles);
    if (inName !== undefined) return { name: inName, sandboxPath };
    const st = await lstat(hostPath);
    let found: string | undefined;
    if (st.isDirectory()) {
      const hit = await scanDir(hostPath, sandboxPath, needles, inFiles);
      if (hit !== undefined) return hit;
    } else if (st.isSymbolicLink()) {
      found = needleIn(Buffer.from(await readlink(hostPath), 'utf8'), needles);
    } else if (st.isFile() && inFiles.length > 0) {
      found = await needleInFile(hostPath, inFiles);
    }
    if (found !== undefined) return { name: found, sandboxPath };
  }
  return undefined;
}

/** Regular files under `dir` whose bytes hold one of `needles` (none with a newline), by `grep -r -F`. */
function grepFiles(dir: string, needles: readonly Needle[]): Promise<string[]> {
  return new Promise((resolve, reject) => {
    const grep = spawn('grep', ['-r', '-l', '-Z', '-F', '-a', '-D', 'skip', '-f', '-', '--', dir], {
      env: { PATH: process.env['PATH'] ?? '/usr/bin:/bin', LC_ALL: 'C' }, stdio: ['pipe', 'pipe', 'pipe'],
    });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    grep.stdout.on('data', (b: Buffer) => out.push(b));
    grep.stderr.on('data', (b: Buffer) => err.push(b));
    grep.on('error', reject);
    grep.on('close', (code) => {
      const files = Buffer.concat(out).toString('utf8').split('\0').filter((f) => f !== '');
      // 1: nothing found; 2 with files: some entry could not be read, and a file found refuses anyway.
      if (code === 0 || code === 1 || files.length > 0) resolve(files);
      else reject(new BerthError('transfer_failed', `could not search the snapshot's files for granted values: grep: ${Buffer.concat(err).toString().trim().split('\n').at(-1) ?? `exit ${code}`}`));
    });
    grep.stdin.on('error', () => undefined);
    grep.stdin.end(Buffer.concat(needles.flatMap((n) => [n.bytes, Buffer.from('\n')])));
  });
}

function needleIn(data: Buffer, needles: readonly Needle[]): string | undefined {
  return needles.find((n) => data.includes(n.bytes))?.name;
}

async function needleInFile(file: string, needles: readonly Needle[]): Promise<string | undefined> {
  const overlap = Math.max(...needles.map((n) => n.bytes.length)) - 1;
  let tail: Buffer = Buffer.alloc(0);
  // The entry was a regular file at lstat: a link or a FIFO swapped in since is neither followed nor waited on.
  const handle = await open(file, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  const stream = handle.createReadStream({ highWaterMark: 1 << 20 });
  try {
    for await (const chunk of stream as AsyncIterable<Buffer>) {
      const window = tail.length === 0 ? chunk : Buffer.concat([tail, chunk]);
      const found = needleIn(window, needles);
      if (found !== undefined) return found;
      tail = window.subarray(Math.max(0, window.length - overlap));
    }
  } finally {
    stream.destroy();
  }
  return undefined;
}

/** The refusal of snapshot `id` because `hit` holds a granted value: names the variable and path, never the value. */
export function forbiddenRefusal(id: string, hit: Pick<ForbiddenHit, 'name' | 'sandboxPath'>): PolicyRefusedError {
  return new PolicyRefusedError(`snapshot ${id} refused: ${hit.sandboxPath} holds the value of granted variable ${hit.name}; ` +
    'remove it from the sandbox (or grant it per command) and take the snapshot again');
}
