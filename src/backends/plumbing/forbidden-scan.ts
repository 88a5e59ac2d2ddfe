import { constants } from 'node:fs';
import { lstat, open, opendir, readlink } from 'node:fs/promises';
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import path from 'node:path';
import { BerthError, PolicyRefusedError } from '../../errors.js';
import type { ForbiddenValue } from '../backend.js';
import { MIN_REDACT_LENGTH } from '../../kit/redaction.js';

/** Where a forbidden value was found: the variable, and the file as the sandbox names it. */
export interface ForbiddenHit {
  name: string;
  sandboxPath: string;
  /** The value is a credential's (see ForbiddenValue.credential). */
  credential?: boolean;
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
/** What one read of a larger file takes in. */
const READ_CHUNK_BYTES = 1 << 20;
/** File names handed to one grep (its argv stays well under the kernel's bound). */
const GREP_ARGV_BYTES = 64 << 10;
/**
 * Entries (files, dirs, links) a snapshot may hold in all: past it the scan refuses it, so a
 * sandbox of millions of tiny files cannot make a snapshot's scan (and copy) run for hours.
 */
export const MAX_SNAPSHOT_ENTRIES = 2_000_000;

/** What a scan may take: its time, and the entries it walks. */
export interface ScanBounds {
  deadlineMs?: number;
  maxEntries?: number;
}

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
  trees: readonly ScannedTree[], forbidden: readonly ForbiddenValue[], bounds: ScanBounds = {},
): Promise<ForbiddenHit | undefined> {
  const deadlineMs = bounds.deadlineMs ?? SCAN_DEADLINE_MS;
  const needles = forbidden
    .filter((f) => f.value.length >= MIN_REDACT_LENGTH)
    .map((f) => ({ name: f.name, bytes: Buffer.from(f.value, 'utf8') }));
  if (needles.length === 0) return undefined;
  const multiline = needles.filter((n) => n.bytes.includes(0x0a));
  const grepped = needles.filter((n) => !n.bytes.includes(0x0a));
  const scan: Scan = {
    needles, grepped, deadline: AbortSignal.timeout(deadlineMs), deadlineMs, tree: { hostDir: '', sandboxDir: '' }, small: [], smallBytes: 0,
    entries: 0, maxEntries: bounds.maxEntries ?? MAX_SNAPSHOT_ENTRIES,
  };
  for (const tree of trees) {
    scan.tree = tree;
    const hit = (await scanDir(scan, tree.hostDir, tree.sandboxDir, multiline, grepped)) ?? (await grepSmall(scan)) ?? (await scanXattrs(scan));
    if (hit !== undefined) return forbidden.some((f) => f.name === hit.name && f.credential === true) ? { ...hit, credential: true } : hit;
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
  /** Entries walked so far, in every tree, and the most it may walk. */
  entries: number;
  maxEntries: number;
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
  // Read as a stream (a dir of millions of names is never held whole); its subdirs are walked
  // after it is closed, so a deep tree does not hold a descriptor per level.
  const dir = await opendir(hostDir, { bufferSize: 256 }).catch((err: NodeJS.ErrnoException) => {
    if (err.code === 'ENOENT') return undefined;
    throw err;
  });
  if (dir === undefined) return undefined;
  const subdirs: string[] = [];
  try {
    for await (const dirent of dir) {
      const hit = await scanEntry(scan, hostDir, sandboxDir, dirent.name, everywhere, large, subdirs);
      if (hit !== undefined) return hit;
    }
  } finally {
    await dir.close().catch(() => undefined);
  }
  for (const entry of subdirs) {
    const hit = await scanDir(scan, path.join(hostDir, entry), path.posix.join(sandboxDir, entry), everywhere, large);
    if (hit !== undefined) return hit;
  }
  return undefined;
}

/** One entry of a dir `scanDir` reads: checked here, or listed in `subdirs` when it is a dir. */
async function scanEntry(
  scan: Scan, hostDir: string, sandboxDir: string, entry: string, everywhere: readonly Needle[], large: readonly Needle[], subdirs: string[],
): Promise<ForbiddenHit | undefined> {
  {
    assertInTime(scan);
    if (++scan.entries > scan.maxEntries) throw tooManyEntries(scan);
    const hostPath = path.join(hostDir, entry);
    const sandboxPath = path.posix.join(sandboxDir, entry);
    const inName = needleIn(Buffer.from(entry, 'utf8'), scan.needles);
    if (inName !== undefined) return { name: inName, sandboxPath };
    const st = await lstat(hostPath);
    let found: string | undefined;
    if (st.isDirectory()) {
      subdirs.push(entry);
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

/** The snapshot holds more entries than a scan walks: refused (what is not walked may hold a value). */
function tooManyEntries(scan: Scan): PolicyRefusedError {
  return new PolicyRefusedError(`snapshot refused: the sandbox holds more than ${scan.maxEntries} files, dirs and links, the most a snapshot may ` +
    'hold (each is searched for granted values); remove files it does not need (build caches, node_modules) and take the snapshot again');
}

/**
 * Extended attributes (names and values, any namespace) of every entry of the current tree
 * against every needle: a value set with `setfattr` travels with a copy or a committed layer as
 * surely as one in a file. Read by `getfattr` (package attr), walking without following links,
 * values hex-encoded so any byte is read as it is; its output is read a line at a time.
 */
async function scanXattrs(scan: Scan): Promise<ForbiddenHit | undefined> {
  assertInTime(scan);
  const { hostDir, sandboxDir } = scan.tree;
  const exists = await lstat(hostDir).then((st) => st.isDirectory(), () => false);
  if (!exists) return undefined;
  const child = spawn('getfattr', ['-R', '-P', '-h', '-d', '-m', '-', '-e', 'hex', '--absolute-names', '--', hostDir], {
    env: { PATH: process.env['PATH'] ?? '/usr/bin:/bin', LC_ALL: 'C' }, stdio: ['ignore', 'pipe', 'pipe'], signal: scan.deadline, killSignal: 'SIGKILL',
  });
  const err: Buffer[] = [];
  child.stderr.on('data', (b: Buffer) => { if (err.length < 16) err.push(b); });
  const closed = new Promise<{ code: number | null; error?: NodeJS.ErrnoException }>((resolve) => {
    child.once('error', (e: NodeJS.ErrnoException) => resolve({ code: null, error: e }));
    child.once('close', (code) => resolve({ code }));
  });
  let file = hostDir;
  let hit: ForbiddenHit | undefined;
  for await (const line of createInterface({ input: child.stdout, crlfDelay: Infinity })) {
    if (line.startsWith('# file: ')) {
      file = unescapeGetfattr(line.slice('# file: '.length));
      continue;
    }
    const eq = line.indexOf('=');
    if (eq <= 0) continue;
    const name = Buffer.from(line.slice(0, eq), 'utf8');
    const raw = line.slice(eq + 1);
    const value = raw.startsWith('0x') ? Buffer.from(raw.slice(2), 'hex') : Buffer.from(raw.replace(/^"|"$/g, ''), 'utf8');
    const found = needleIn(name, scan.needles) ?? needleIn(value, scan.needles);
    if (found !== undefined) {
      hit = { name: found, sandboxPath: path.posix.join(sandboxDir, path.relative(hostDir, file)) };
      child.kill('SIGKILL');
      break;
    }
  }
  const end = await closed;
  if (hit !== undefined) return hit;
  if (scan.deadline.aborted) throw outOfTime(scan);
  if (end.error?.code === 'ENOENT') {
    throw new BerthError('transfer_failed', 'cannot search the snapshot\'s extended attributes for granted values: getfattr is not installed on berth\'s host; install it (Debian/Ubuntu: apt-get install attr)');
  }
  // 1: some entry had none or vanished meanwhile (a snapshot's tree is still), anything else: failed.
  if (end.code !== 0 && end.code !== 1) {
    throw new BerthError('transfer_failed', `could not search the snapshot's extended attributes for granted values: getfattr: ${Buffer.concat(err).toString().trim().split('\n').at(-1) ?? `exit ${String(end.code)}`}`);
  }
  return undefined;
}

/** A path as getfattr prints it: octal escapes (`\\012`) for special bytes, backslash doubled. */
function unescapeGetfattr(p: string): string {
  return Buffer.from(p.replace(/\\([0-7]{3})|\\\\/g, (m, o: string | undefined) => (o === undefined ? '\\' : String.fromCharCode(parseInt(o, 8)))), 'latin1').toString('utf8');
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
  // One buffer for every read: the last `overlap` bytes of a read move to its front, the next read
  // fills the rest, so a value split across two reads is found and nothing is copied but the seam.
  const buf = Buffer.allocUnsafe(READ_CHUNK_BYTES + overlap);
  let kept = 0;
  // The entry was a regular file at lstat: a link or a FIFO swapped in since is neither followed nor waited on.
  const handle = await open(file, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  try {
    for (;;) {
      assertInTime(scan);
      const { bytesRead } = await handle.read(buf, kept, READ_CHUNK_BYTES, null);
      if (bytesRead === 0) return undefined;
      const filled = kept + bytesRead;
      const found = needleIn(buf.subarray(0, filled), needles);
      if (found !== undefined) return found;
      kept = Math.min(overlap, filled);
      buf.copy(buf, 0, filled - kept, filled);
    }
  } finally {
    await handle.close();
  }
}

/** The refusal of snapshot `id` because `hit` holds a granted value: names the variable and path, never the value. */
export function forbiddenRefusal(id: string, hit: Pick<ForbiddenHit, 'name' | 'sandboxPath' | 'credential'>): PolicyRefusedError {
  if (hit.credential === true) {
    return new PolicyRefusedError(`snapshot ${id} refused: ${hit.sandboxPath} holds the real value of credential ${hit.name} ` +
      '(the sandbox holds only its placeholder: a credential host sent the value back); remove it from the sandbox and take the snapshot again');
  }
  return new PolicyRefusedError(`snapshot ${id} refused: ${hit.sandboxPath} holds the value of granted variable ${hit.name}; ` +
    'remove it from the sandbox (or grant it per command) and take the snapshot again');
}
