import { constants } from 'node:fs';
import { lstat, open, readdir, readlink } from 'node:fs/promises';
import path from 'node:path';
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
 * target), or undefined. Files are read in chunks with an overlap of the longest value, so memory
 * stays bounded whatever their size and a value across two chunks is still found. Links are never
 * followed and only regular files are opened (a FIFO planted by the sandbox cannot hang the scan).
 * Values shorter than the redactor's minimum are not looked for, as output redaction ignores them.
 */
export async function findForbidden(trees: readonly ScannedTree[], forbidden: readonly ForbiddenValue[]): Promise<ForbiddenHit | undefined> {
  const needles = forbidden
    .filter((f) => f.value.length >= MIN_REDACT_LENGTH)
    .map((f) => ({ name: f.name, bytes: Buffer.from(f.value, 'utf8') }));
  if (needles.length === 0) return undefined;
  for (const tree of trees) {
    const hit = await scanDir(tree.hostDir, tree.sandboxDir, needles);
    if (hit !== undefined) return hit;
  }
  return undefined;
}

interface Needle {
  name: string;
  bytes: Buffer;
}

async function scanDir(hostDir: string, sandboxDir: string, needles: readonly Needle[]): Promise<ForbiddenHit | undefined> {
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
      const hit = await scanDir(hostPath, sandboxPath, needles);
      if (hit !== undefined) return hit;
    } else if (st.isSymbolicLink()) {
      found = needleIn(Buffer.from(await readlink(hostPath), 'utf8'), needles);
    } else if (st.isFile()) {
      found = await needleInFile(hostPath, needles);
    }
    if (found !== undefined) return { name: found, sandboxPath };
  }
  return undefined;
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
