import { execFile, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, readdir, rename, rm } from 'node:fs/promises';
import path from 'node:path';
import { PassThrough, type Readable, type Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { BerthError } from '../../errors.js';
import { duFigures } from './snapshot-budget.js';

/*
 * The host side of a snapshot: `$BERTH_HOME/snapshots/<backend>/<id>/`, private to berth (0700),
 * holding copies of a sandbox's own dirs. Copies are `cp -a --reflink=auto`: a clone of each
 * file's blocks where the filesystem has it (btrfs, xfs), a plain copy elsewhere; owners, modes,
 * times and links kept, links never followed.
 */

const COPY_TIMEOUT_MS = 30 * 60_000;

/** The dir every snapshot of `backend` lives in. */
export function snapshotsRoot(berthHome: string, backend: string): string {
  return path.join(path.resolve(berthHome), 'snapshots', backend);
}

/** A snapshot id goes into paths and engine names: refused unless it is a plain name. */
export function assertSnapshotId(id: string): void {
  if (!/^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$/.test(id)) {
    throw new BerthError('invalid_ref', `snapshot id "${id}" is not a plain name (letters, digits, "_", ".", "-", at most 64)`);
  }
}

/** Makes the snapshot's dir, new and private; one that exists already is an error (ids are unique). */
export async function makeSnapshotDir(root: string, id: string): Promise<string> {
  assertSnapshotId(id);
  await mkdir(root, { recursive: true, mode: 0o700 });
  const dir = path.join(root, id);
  try {
    await mkdir(dir, { mode: 0o700 });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'EEXIST') throw new BerthError('internal', `snapshot ${id} exists already at ${dir}`);
    throw err;
  }
  return dir;
}

/**
 * Copies the tree `src` to `dst` (which must not exist), as the module comment says; a mount
 * under `src` (an operator's volume) is left out, as its files are not the sandbox's.
 */
export function copyTree(src: string, dst: string): Promise<void> {
  return run('cp', ['-a', '--reflink=auto', '--one-file-system', '--no-target-directory', '--', src, dst]);
}

/** Bytes the tree takes on disk (`du`), 0 when it is gone. */
export async function treeBytes(dir: string): Promise<number> {
  const out = await runOut('du', ['-s', '-B1', '-x', '--', dir]).catch(() => '0');
  return Number(out.split(/\s/)[0]) || 0;
}

/**
 * What a snapshot's copy of a dir holds: its entries (inodes, `du --inodes`) and apparent bytes,
 * links never followed. Recorded when the snapshot is made and compared before it is used, so a
 * copy that lost files or had one truncated or grown behind berth's back is refused instead of
 * restored partly. A file changed in place to the same length is not caught.
 */
export interface TreeTally {
  entries: number;
  bytes: number;
}

/** The tally of `dir`; a tree berth cannot read all of is an error naming it (`transfer_failed`). */
export async function treeTally(dir: string): Promise<TreeTally> {
  return (await treeTallies([dir]))[0] as TreeTally;
}

/** `treeTally` of each of `dirs` (trees apart from each other), by two `du` processes in all. */
async function treeTallies(dirs: readonly string[]): Promise<TreeTally[]> {
  try {
    const [bytes, entries] = await Promise.all([duFigures(dirs, ['-B1', '--apparent-size'], COPY_TIMEOUT_MS), duFigures(dirs, ['--inodes'], COPY_TIMEOUT_MS)]);
    return dirs.map((_, i) => ({ entries: entries[i] ?? 0, bytes: bytes[i] ?? 0 }));
  } catch (err) {
    throw new BerthError('transfer_failed', `could not count what ${dirs.join(', ')} hold${dirs.length === 1 ? 's' : ''} (du: ${(err as Error).message})`, { cause: err });
  }
}

/** The tally of each of `names` under `root`. */
export async function tallies<N extends string>(root: string, names: readonly N[]): Promise<Partial<Record<N, TreeTally>>> {
  const counted = await treeTallies(names.map((n) => path.join(root, n)));
  return Object.fromEntries(names.map((n, i) => [n, counted[i]])) as Partial<Record<N, TreeTally>>;
}

/**
 * Refuses snapshot `id` (damagedSnapshot) when its copy `dir` of the sandbox's `target` is gone or
 * no longer holds what was `recorded` (a snapshot an earlier berth made recorded nothing: only
 * that the copy exists is checked).
 */
export async function checkCopy(id: string, target: string, dir: string, recorded: TreeTally | undefined): Promise<void> {
  await checkCopies(id, [{ target, dir, recorded }]);
}

/** `checkCopy` of each of `copies`, counted at once. */
export async function checkCopies(id: string, copies: ReadonlyArray<{ target: string; dir: string; recorded: TreeTally | undefined }>): Promise<void> {
  for (const c of copies) if (!existsSync(c.dir)) throw damagedSnapshot(id, `its copy of ${c.target} (${c.dir}) is gone`);
  const counted = copies.filter((c) => c.recorded !== undefined);
  const now = await treeTallies(counted.map((c) => c.dir)).catch((err: unknown) => {
    throw damagedSnapshot(id, `its copy of ${counted.map((c) => c.target).join(', ')} cannot be read whole: ${(err as Error).message}`);
  });
  counted.forEach((c, i) => {
    const [was, is] = [c.recorded as TreeTally, now[i] as TreeTally];
    if (is.entries !== was.entries || is.bytes !== was.bytes) {
      throw damagedSnapshot(id, `its copy of ${c.target} (${c.dir}) holds ${is.entries} entries and ${is.bytes} bytes where the snapshot recorded ` +
        `${was.entries} and ${was.bytes}: files in it were removed or changed outside berth`);
    }
  });
}

/** Whether `dir` is an existing dir with nothing in it (or does not exist). */
export async function isEmptyDir(dir: string): Promise<boolean> {
  const entries = await readdir(dir).catch((err: NodeJS.ErrnoException) => (err.code === 'ENOENT' ? [] : Promise.reject(err)));
  return entries.length === 0;
}

/**
 * Unpacks a sandbox's archive of one dir (`./<base>` and what is below it, as
 * `Sandbox.getArchive` gives it) as `dst` on the host (which must not exist). GNU tar refuses
 * members outside its dir and sets links last, so an archive cannot write through a link it
 * made; it unpacks into a fresh private dir beside `dst`, never bound into a sandbox. The archive
 * flows through `through` (a byte cap) first, when given. `owners: 'mine'` makes every file
 * berth's own (modes kept): for a copy whose owner a restore sets anew, which a berth not running
 * as root must be able to write.
 */
export async function unpackAs(archive: Readable, dst: string, through?: Transform, owners: 'archived' | 'mine' = 'archived'): Promise<void> {
  const staging = `${dst}.unpack`;
  await mkdir(staging, { mode: 0o700 });
  try {
    await untar(archive, staging, through, owners);
    const [base, ...more] = await readdir(staging);
    if (base === undefined || more.length > 0) throw new BerthError('transfer_failed', `the sandbox's archive of ${path.basename(dst)} held ${more.length + (base === undefined ? 0 : 1)} top entries, not one`);
    await rename(path.join(staging, base), dst);
  } finally {
    await rm(staging, { recursive: true, force: true });
  }
}

async function untar(archive: Readable, dir: string, through: Transform | undefined, owners: 'archived' | 'mine'): Promise<void> {
  const ownership = owners === 'archived' ? ['--same-owner', '--numeric-owner'] : ['--no-same-owner', '--same-permissions'];
  const tar = spawn('tar', ['-x', '-f', '-', '-C', dir, ...ownership, '--delay-directory-restore'], {
    stdio: ['pipe', 'ignore', 'pipe'],
  });
  const stderr: Buffer[] = [];
  tar.stderr.on('data', (b: Buffer) => stderr.push(b));
  const exited = new Promise<number | null>((resolve) => tar.on('close', resolve));
  try {
    await (through === undefined ? pipeline(archive, tar.stdin) : pipeline(archive, through, tar.stdin));
  } catch (err) {
    // tar stops reading at the archive's end marker and exits 0; the record's zero padding after
    // it may still be on its way, and writing it fails. Then tar, done reading, is let exit: 0
    // says the archive was whole (its source says on its own whether it failed).
    // (pipeline destroys the archive with a premature close of its own: any other error is its source's.)
    const sourceFailed = archive.errored !== null && (archive.errored as NodeJS.ErrnoException).code !== 'ERR_STREAM_PREMATURE_CLOSE';
    const stdinClosed = ['EPIPE', 'ERR_STREAM_PREMATURE_CLOSE'].includes((err as NodeJS.ErrnoException).code ?? '') && !sourceFailed;
    if (!stdinClosed) tar.kill('SIGKILL');
    const code = await exited;
    if (code === 0 && stdinClosed) return;
    if (err instanceof BerthError) throw err;
    if (stdinClosed) throw new BerthError('transfer_failed', `tar could not unpack a sandbox dir into the snapshot: ${lastLine(stderr) ?? `exit ${code}`}`);
    throw new BerthError('transfer_failed', `could not copy a sandbox dir into the snapshot: ${(err as Error).message}`, { cause: err });
  }
  const code = await exited;
  if (code !== 0) throw new BerthError('transfer_failed', `tar could not unpack a sandbox dir into the snapshot: ${lastLine(stderr) ?? `exit ${code}`}`);
}

/**
 * A tar stream of what is inside `dir` (entries `./…`), for `Sandbox.putArchive` into the dir it
 * came from; it errors when tar could not read all of it.
 */
export function packDir(dir: string): Readable {
  return packWith(dir, ['.']);
}

const DIR_NAME = /^[a-z][a-z0-9]*$/;

/**
 * One tar stream of several dirs under `parent`, each entry renamed from its dir's name to `as`
 * (`home/x` as `root/x`), for one `Sandbox.putArchive` at `/`: one process in the sandbox instead
 * of one per dir. Link targets are never renamed: a link keeps pointing where it pointed.
 */
export function packDirs(parent: string, dirs: ReadonlyArray<{ name: string; as: string }>): Readable {
  const transforms: string[] = [];
  for (const { name, as } of dirs) {
    if (!DIR_NAME.test(name) || !DIR_NAME.test(as)) throw new BerthError('internal', `"${name}" -> "${as}" is not a plain dir name pair`);
    // Anchored on the whole first component, on member and hard-link names, never symlink targets (S).
    if (name !== as) transforms.push(`--transform=s,^${name}\\(/\\|$\\),${as}\\1,S`);
  }
  return packWith(parent, [...transforms, '--', ...dirs.map((d) => d.name)]);
}

function packWith(dir: string, members: readonly string[]): Readable {
  const out = new PassThrough();
  const tar = spawn('tar', ['-c', '-f', '-', '-C', dir, '--numeric-owner', ...members], { stdio: ['ignore', 'pipe', 'pipe'] });
  const stderr: Buffer[] = [];
  tar.stderr.on('data', (b: Buffer) => stderr.push(b));
  tar.stdout.pipe(out, { end: false });
  tar.on('close', (code) => {
    if (code === 0) out.end();
    else out.destroy(new BerthError('transfer_failed', `tar could not read the snapshot's ${dir}: ${lastLine(stderr) ?? `exit ${code}`}`));
  });
  out.on('close', () => tar.kill('SIGKILL'));
  return out;
}

function lastLine(chunks: Buffer[]): string | undefined {
  return Buffer.concat(chunks).toString().trim().split('\n').at(-1) || undefined;
}

/** Removes `dir` under `root` (a snapshot's), gone is success. */
export async function removeSnapshotDir(root: string, id: string): Promise<void> {
  assertSnapshotId(id);
  await rm(path.join(root, id), { recursive: true, force: true });
}

function run(cmd: string, args: readonly string[]): Promise<void> {
  return runOut(cmd, args).then(() => undefined);
}

function runOut(cmd: string, args: readonly string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(cmd, args, { timeout: COPY_TIMEOUT_MS, maxBuffer: 1 << 20 }, (err, out, stderr) => {
      if (err) reject(new BerthError('transfer_failed', `${cmd}: ${stderr.trim().split('\n').at(-1) || err.message}`, { cause: err }));
      else resolve(out);
    });
  });
}

/** Snapshot `id` is missing or damaged (`what`): a restore or fork from it changes nothing. */
export function damagedSnapshot(id: string, what: string): BerthError {
  return new BerthError('not_found', `snapshot ${id} cannot be used: ${what}; nothing was changed. Remove it (berth snapshot rm) and take a new one`);
}

