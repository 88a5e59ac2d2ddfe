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

/** How long a snapshot's scan may take; past it the snapshot is refused (fail closed). */
const SCAN_DEADLINE_MS = 5 * 60_000;
/**
 * Files up to this size go to `grep`, which holds a whole line in memory (a file with no newline
 * whole); larger ones are read here in 1 MiB chunks that overlap by the longest value, so memory
 * stays bounded whatever a file holds, and a value is found wherever it sits.
 */
const GREP_FILE_MAX_BYTES = 16 << 20;
/** File names handed to one grep (its argv stays well under the kernel's bound). */
const GREP_ARGV_BYTES = 64 << 10;

/**
 * The first file under `trees` that holds one of `forbidden` (in its bytes, its name, or a link's
 * target), or undefined. Names and link targets are checked during a walk that never follows a
 * link and opens only regular files. Contents are searched by `grep -F` for files up to
 * GREP_FILE_MAX_BYTES (fixed strings read from its stdin, never an argv; ~10x faster than a search
 * in this process), and here in overlapping chunks for larger files and for values with a newline
 * (grep's pattern separator). A scan that cannot finish within `deadlineMs` refuses the snapshot:
 * a file not searched may hold a value. Values shorter than the redactor's minimum are not looked
 * for, as output redaction ignores them.
 */
export async function findForbidden(
  trees: readonly ScannedTree[], forbidden: readonly ForbiddenValue[], deadlineMs: number = SCAN_DEADLINE_MS,
): Promise<ForbiddenHit | undefined> {
  const needles = forbidden
    .filter((f) => f.value.length >= MIN_REDACT_LENGTH)
    .map((f) => ({ name: f.name, bytes: Buffer.from(f.value, 'utf8') }));
  if (needles.length === 0) return undefined;
  const multiline = needles.filter((n) => n.bytes.includes(0x0a));
  const grepped = needles.filter((n) => !n.bytes.includes(0x0a));
  const scan: Scan = { needles, grepped, deadline: AbortSignal.timeout(deadlineMs), deadlineMs, tree: { hostDir: '', sandboxDir: '' }, small: [], smallBytes: 0 };
  for (const tree of trees) {
    scan.tree = tree;
    const hit = (await scanDir(scan, tree.hostDir, tree.sandboxDir, multiline, grepped)) ?? (await grepSmall(scan));
    if (hit !== undefined) return hit;
  }
  return undefined;
}

interface Needle {
  name: string;
  bytes: Buffer;
}

interface Scan {
  needles: readonly Needle[];
  /** The needles grep looks for (no newline in them). */
  grepped: readonly Needle[];
  deadline: AbortSignal;
  deadlineMs: number;
  /** The tree being walked. */
  tree: ScannedTree;
  /** Regular files of it waiting for grep: handed over whenever they fill one grep's argv, so a tree of millions of files never sits here whole. */
  small: string[];
  smallBytes: number;
}

/** Greps the files waiting in `scan.small` (and empties it): the first that holds a value, as the sandbox names it. */
async function grepSmall(scan: Scan): Promise<ForbiddenHit | undefined> {
  const files = scan.small;
  scan.small = [];
  scan.smallBytes = 0;
  for (const file of scan.grepped.length === 0 ? [] : await grepFiles(scan, files, scan.grepped)) {
    const name = await needleInFile(scan, file, scan.grepped);
    if (name !== undefined) return { name, sandboxPath: path.posix.join(scan.tree.sandboxDir, path.relative(scan.tree.hostDir, file)) };
  }
  return undefined;
}

/**
 * Names and link targets under `hostDir` against every needle; file contents against
 * `everywhere`, and against `large` too in files grep does not get (the rest are listed in
 * `scan.small` for it).
 */
async function scanDir(scan: Scan, hostDir: string, sandboxDir: string, everywhere: readonly Needle[], large: readonly Needle[]): Promise<ForbiddenHit | undefined> {
  const entries = await readdir(hostDir).catch((err: NodeJS.ErrnoException) => {
    if (err.code === 'ENOENT') return [];
    throw err;
  });
  for (const entry of entries) {
    assertInTime(scan);
    const hostPath = path.join(hostDir, entry);
    const sandboxPath = path.posix.join(sandboxDir, entry);
    const inName = needleIn(Buffer.from(entry, 'utf8'), scan.needles);
    if (inName !== undefined) return { name: inName, sandboxPath };
    const st = await lstat(hostPath);
    let found: string | undefined;
    if (st.isDirectory()) {
      const hit = await scanDir(scan, hostPath, sandboxPath, everywhere, large);
      if (hit !== undefined) return hit;
    } else if (st.isSymbolicLink()) {
      found = needleIn(Buffer.from(await readlink(hostPath), 'utf8'), scan.needles);
    } else if (st.isFile()) {
      const here = st.size > GREP_FILE_MAX_BYTES ? [...everywhere, ...large] : everywhere;
      if (st.size <= GREP_FILE_MAX_BYTES && large.length > 0) {
        scan.small.push(hostPath);
        scan.smallBytes += hostPath.length + 1;
      }
      if (here.length > 0) found = await needleInFile(scan, hostPath, here);
    }
    if (found !== undefined) return { name: found, sandboxPath };
    if (scan.smallBytes >= GREP_ARGV_BYTES) {
      const hit = await grepSmall(scan);
      if (hit !== undefined) return hit;
    }
  }
  return undefined;
}

/** Those of `files` whose bytes hold one of `needles` (none with a newline), by `grep -F`, in batches. */
async function grepFiles(scan: Scan, files: readonly string[], needles: readonly Needle[]): Promise<string[]> {
  const found: string[] = [];
  for (let i = 0; i < files.length;) {
    const batch: string[] = [];
    for (let bytes = 0; i < files.length && (batch.length === 0 || bytes + (files[i] as string).length < GREP_ARGV_BYTES); i++) {
      batch.push(files[i] as string);
      bytes += (files[i] as string).length + 1;
    }
    found.push(...await grepBatch(scan, batch, needles));
    if (found.length > 0) return found;
  }
  return found;
}

function grepBatch(scan: Scan, files: readonly string[], needles: readonly Needle[]): Promise<string[]> {
  assertInTime(scan);
  return new Promise((resolve, reject) => {
    // Each path was a regular file at lstat, in a tree no sandbox process writes meanwhile.
    const grep = spawn('grep', ['-l', '-Z', '-F', '-a', '-D', 'skip', '-f', '-', '--', ...files], {
      env: { PATH: process.env['PATH'] ?? '/usr/bin:/bin', LC_ALL: 'C' }, stdio: ['pipe', 'pipe', 'pipe'], signal: scan.deadline, killSignal: 'SIGKILL',
    });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    grep.stdout.on('data', (b: Buffer) => out.push(b));
    grep.stderr.on('data', (b: Buffer) => err.push(b));
    grep.on('error', (e) => reject(scan.deadline.aborted ? outOfTime(scan) : e));
    grep.on('close', (code) => {
      if (scan.deadline.aborted) return reject(outOfTime(scan));
      const hits = Buffer.concat(out).toString('utf8').split('\0').filter((f) => f !== '');
      // 1: nothing found; 2 with files: some entry could not be read, and a file found refuses anyway.
      if (code === 0 || code === 1 || hits.length > 0) resolve(hits);
      else reject(new BerthError('transfer_failed', `could not search the snapshot's files for granted values: grep: ${Buffer.concat(err).toString().trim().split('\n').at(-1) ?? `exit ${code}`}`));
    });
    grep.stdin.on('error', () => undefined);
    grep.stdin.end(Buffer.concat(needles.flatMap((n) => [n.bytes, Buffer.from('\n')])));
  });
}

function assertInTime(scan: Scan): void {
  if (scan.deadline.aborted) throw outOfTime(scan);
}

/** The scan ran out of time: what was not searched may hold a value, so the snapshot is refused. */
function outOfTime(scan: Scan): PolicyRefusedError {
  return new PolicyRefusedError(`snapshot refused: its files could not all be searched for granted values within ${Math.round(scan.deadlineMs / 1000)} s, ` +
    'and one not searched may hold one; remove large files from the sandbox, or snapshot a sandbox without secret grants');
}

function needleIn(data: Buffer, needles: readonly Needle[]): string | undefined {
  return needles.find((n) => data.includes(n.bytes))?.name;
}

async function needleInFile(scan: Scan, file: string, needles: readonly Needle[]): Promise<string | undefined> {
  const overlap = Math.max(...needles.map((n) => n.bytes.length)) - 1;
  let tail: Buffer = Buffer.alloc(0);
  // The entry was a regular file at lstat: a link or a FIFO swapped in since is neither followed nor waited on.
  const handle = await open(file, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  const stream = handle.createReadStream({ highWaterMark: 1 << 20 });
  try {
    for await (const chunk of stream as AsyncIterable<Buffer>) {
      assertInTime(scan);
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
