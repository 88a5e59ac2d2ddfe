import { randomBytes } from 'node:crypto';
import { copyFile, mkdir, mkdtemp, open, realpath, rename, rm, stat, type FileHandle } from 'node:fs/promises';
import { dirname, join, posix, sep } from 'node:path';
import { Readable } from 'node:stream';
import type { Sandbox } from '../backends/backend.js';
import { BerthError, PolicyRefusedError, UsageError } from '../errors.js';
import { ByteRedactor } from '../kit/redaction.js';
import { FileTooLargeError, PathNotFoundError } from './errors.js';
import { resolveInSandbox, type ResolvedPath } from './resolve-in-sandbox.js';
import { assertSandboxPath, cleanEntryName, normalizeSandboxPath, sandboxPathRefusal, type SandboxPathPolicy } from './sandbox-path.js';
import { ENTRY_BYTES, type StagingLease } from './staging-quota.js';
import { readTar, TarFormatError, TarSizeMismatchError, tarStreamOfFile, writeTar, type TarWriteEntry } from './tar.js';

/** Everything a transfer needs about its call, resolved by the broker. */
export interface TransferContext {
  sandbox: Sandbox;
  policy: SandboxPathPolicy;
  /** The shell identity's cwd inside the sandbox: relative paths start here. */
  cwd: string;
  /** `files.maxBytes` of the call's profile. */
  maxBytes: number;
  /** Creates (if needed) and returns the call scope's private staging dir on the host. */
  staging: () => Promise<string>;
  /** Starts counting one export against its tenant's staging bound (`limits.stagingBytes`). */
  stagingLease: () => Promise<StagingLease>;
  /**
   * `files.mediaMode`: `copy` (default) hands out a copy in staging; `live` the file under the
   * sandbox's own host dir when it has one (an agent can swap it for a symlink after the check).
   */
  mediaMode?: 'copy' | 'live';
  /** Granted secret values (>= 8 chars) to redact from content returned to the caller (`readSandboxFile`). */
  redactValues?: readonly string[];
  log?: (message: string) => void;
}

const CAP_SETTING = 'files.maxBytes';
/** Landing a written file: a stat and a rename inside the sandbox. */
const LAND_TIMEOUT_MS = 30_000;

interface Cap {
  limit: number;
  setting: string;
  fix: string | undefined;
}

function capOf(ctx: TransferContext, asked: number | undefined): Cap {
  if (asked === undefined || asked >= ctx.maxBytes) return { limit: ctx.maxBytes, setting: CAP_SETTING, fix: undefined };
  if (!Number.isSafeInteger(asked) || asked < 0) throw new UsageError(`maxBytes must be a non-negative integer, got ${String(asked)}`);
  return { limit: asked, setting: 'maxBytes of the call', fix: `pass a larger maxBytes (up to ${CAP_SETTING} = ${ctx.maxBytes})` };
}

function tooLarge(what: string, cap: Cap): FileTooLargeError {
  return new FileTooLargeError(what, cap.limit, cap.setting, cap.fix);
}

async function resolveOne(ctx: TransferContext, path: string): Promise<ResolvedPath> {
  const abs = normalizeSandboxPath(path, ctx.cwd);
  const [r] = await resolveInSandbox(ctx.sandbox, [abs]);
  if (r === undefined) throw new BerthError('internal', `no resolution for ${abs}`);
  if (r.kind === 'dangling') {
    throw new PolicyRefusedError(`sandbox path ${JSON.stringify(abs)} goes through a symlink that points nowhere (${JSON.stringify(r.real)}); name the real file`);
  }
  return r;
}

/** Refused paths first (so a missing file under /proc is a refusal, not "not found"), then existence. */
function requireExisting(ctx: TransferContext, r: ResolvedPath, want: 'file' | 'file-or-dir'): void {
  assertSandboxPath(r.asked, r.real, ctx.policy);
  if (r.kind === 'missing') throw new PathNotFoundError(`sandbox path ${JSON.stringify(r.asked)} does not exist in sandbox ${ctx.sandbox.name}`);
  if (r.kind === 'other') throw new PolicyRefusedError(`sandbox path ${JSON.stringify(r.asked)} is not a regular file or directory (device, socket or fifo); only files and folders are transferred`);
  if (want === 'file' && r.kind === 'dir') throw new UsageError(`sandbox path ${JSON.stringify(r.asked)} is a directory; name a file`);
}

function splitExisting(r: ResolvedPath): { base: string; missing: string[] } {
  const base = r.real.slice(0, r.real.length - r.missing.length) || '/';
  return { base, missing: r.missing.split('/').filter((s) => s !== '') };
}

/**
 * The permission bits a transfer carries: read, write and execute for owner, group and others, so
 * a 0755 script stays executable and a 0644 file stays 0644. setuid, setgid and sticky bits are
 * never carried (into a sandbox or onto the host), and neither is ownership: what lands belongs to
 * whoever writes it (the sandbox's user; berth's on the host).
 */
function carriedMode(mode: number): number {
  return mode & 0o777;
}

/**
 * The mode of a file or dir an export writes on the host: the sandbox's bits (`carriedMode`), and
 * always read and write (and for a dir, enter) for berth's own user, which copies them out and
 * removes them later. The process umask applies, as it does to any file berth writes.
 */
function stagedMode(mode: number, dir: boolean): number {
  return carriedMode(mode) | (dir ? 0o700 : 0o600);
}

/**
 * Writes one file into the sandbox (missing parent dirs are created). Verified afterwards: the
 * call succeeds only when the file is there with the right size.
 */
export async function uploadFile(ctx: TransferContext, a: { path: string; data: Buffer; mode?: number }): Promise<{ path: string; bytes: number }> {
  if (!Buffer.isBuffer(a.data)) throw new UsageError('upload data must be a Buffer');
  const data = a.data;
  return uploadStream(ctx, { path: a.path, size: data.length, stream: (async function* () { yield data; })(), mode: a.mode });
}

/*
 * Lands a written file: checks the temp file is a regular file of the announced size, then renames
 * it over the target (rename replaces a symlink there rather than writing through it). Prints the
 * size found and exits 1 otherwise. Also the clean-up after a failed delivery (size -1 never matches).
 */
const LAND_SCRIPT = `
t=$1; f=$2; n=$3; shift 3
s=-1
if [ -f "$t" ] && [ ! -L "$t" ]; then s=$(stat -c %s -- "$t" 2>/dev/null) || s=-1; fi
if [ "$s" = "$n" ] && [ ! -d "$f" ] && mv -f -- "$t" "$f"; then exit 0; fi
rm -f -- "$t"
for d do rmdir -- "$d" 2>/dev/null; done
printf '%s' "$s"
exit 1
`;

/**
 * Streams one file of `size` bytes into the sandbox: the path is resolved and checked, and the size
 * held against `files.maxBytes`, before a byte of `stream` is read. The bytes go into a temp file
 * beside the target as they arrive (a tar stream into the sandbox's own tar, never buffered whole),
 * which is renamed over the target only once it has exactly `size` bytes. On any failure (a refused
 * path, a stream that ends early or runs long, a sandbox error) nothing is left behind: no temp file,
 * no parent dir this upload created, and an existing target is untouched. A refused call does not
 * read `stream`; disposing of it is the caller's.
 */
export async function uploadStream(
  ctx: TransferContext,
  a: { path: string; size: number; stream: AsyncIterable<Uint8Array>; mode?: number },
): Promise<{ path: string; bytes: number }> {
  if (a.mode !== undefined && (!Number.isInteger(a.mode) || a.mode < 0 || a.mode > 0o7777)) throw new UsageError(`mode must be a file mode between 0 and 0o7777, got ${String(a.mode)}`);
  const mode = carriedMode(a.mode ?? 0o644);
  if (!Number.isSafeInteger(a.size) || a.size < 0) throw new UsageError(`size must be a whole number of bytes >= 0, got ${String(a.size)}`);
  if (typeof (a.stream as Partial<AsyncIterable<Uint8Array>> | null)?.[Symbol.asyncIterator] !== 'function') {
    throw new UsageError('upload stream must be a readable stream (or an async iterable of byte chunks)');
  }
  if (a.size > ctx.maxBytes) throw new FileTooLargeError(`upload to ${JSON.stringify(a.path)} (${a.size} bytes)`, ctx.maxBytes, CAP_SETTING);
  const r = await resolveOne(ctx, a.path);
  assertSandboxPath(r.asked, r.real, ctx.policy);
  if (r.kind === 'dir') throw new UsageError(`sandbox path ${JSON.stringify(r.asked)} is a directory; name the file to write, e.g. ${posix.join(r.asked, 'name')}`);
  if (r.kind === 'other') throw new PolicyRefusedError(`sandbox path ${JSON.stringify(r.asked)} is not a regular file; refusing to write over it`);
  const temp = `.berth-upload-${randomBytes(8).toString('hex')}`;
  let destDir: string;
  const dirs: TarWriteEntry[] = [];
  let fileEntry: string;
  if (r.kind === 'missing') {
    const { base, missing } = splitExisting(r);
    destDir = base;
    for (let i = 1; i < missing.length; i++) dirs.push({ name: missing.slice(0, i).join('/'), type: 'dir', mode: 0o755 });
    fileEntry = [...missing.slice(0, -1), temp].join('/');
  } else {
    destDir = posix.dirname(r.real);
    fileEntry = temp;
  }
  const tempPath = posix.join(destDir, fileEntry);
  // Deepest first: the clean-up removes only what stayed empty.
  const created = dirs.map((d) => posix.join(destDir, d.name)).reverse();
  const land = (size: number): Promise<{ exitCode: number; stdout: Buffer }> =>
    ctx.sandbox.execOnce(['sh', '-c', LAND_SCRIPT, 'berth-land', tempPath, r.real, String(size), ...created], { timeoutMs: LAND_TIMEOUT_MS, maxOutputBytes: 64 * 1024 });
  let received = 0;
  let senderFailed = false;
  const source = (async function* (): AsyncGenerator<Uint8Array> {
    try {
      for await (const chunk of a.stream) {
        received += chunk.byteLength;
        yield chunk;
      }
    } catch (err) {
      senderFailed = true;
      throw err;
    }
  })();
  try {
    await ctx.sandbox.putArchive(destDir, Readable.from(tarStreamOfFile(dirs, { name: fileEntry, mode, size: a.size }, source)));
  } catch (err) {
    await land(-1).catch((e: unknown) => ctx.log?.(`clean-up of ${tempPath} after a failed upload: ${String(e)}`));
    if (err instanceof TarSizeMismatchError) {
      throw new UsageError(`upload to ${JSON.stringify(r.real)}: ${err.message}; nothing was written`);
    }
    if (senderFailed) {
      // The sender went away (a client hung up) or its stream broke: its doing, not the sandbox's.
      throw new BerthError('upload_incomplete',
        `upload to ${JSON.stringify(r.real)} stopped after ${received} of ${a.size} bytes: the sender's stream failed (${err instanceof Error ? err.message : String(err)}); nothing was written`,
        { cause: err });
    }
    if (err instanceof BerthError) throw err;
    throw new BerthError('transfer_failed', `upload to ${JSON.stringify(r.real)} in sandbox ${ctx.sandbox.name} failed while receiving it (${err instanceof Error ? err.message : String(err)}); nothing was written`, { cause: err });
  }
  const landed = await land(a.size);
  if (landed.exitCode !== 0) {
    throw new BerthError('transfer_failed', `upload to ${JSON.stringify(r.real)} in sandbox ${ctx.sandbox.name} did not land (found ${landed.stdout.toString('utf8') || '-1'} bytes of ${a.size}); nothing was written`);
  }
  return { path: r.real, bytes: a.size };
}

interface ParsedEntry {
  name: string;
  type: 'file' | 'dir';
  mode: number;
  data: Buffer | undefined;
}

/**
 * Parses a caller's tar strictly: files and dirs with safe relative names only. Each entry costs
 * 512 bytes (its header) besides its content against the cap, so 20,000 empty files do not pass
 * a small one.
 */
async function parseUploadTar(tar: Buffer, maxBytes: number): Promise<ParsedEntry[]> {
  const entries: ParsedEntry[] = [];
  let total = 0;
  let seen = 0;
  const tooMany = (): FileTooLargeError => new FileTooLargeError(
    `the archive's entries (over ${total} bytes, counting ${ENTRY_BYTES} bytes for each of its ${seen} entries so far)`, maxBytes, CAP_SETTING);
  try {
    await readTar(Readable.from([tar]), (h) => {
      seen++;
      total += ENTRY_BYTES;
      if (total > maxBytes) throw tooMany();
      const name = cleanEntryName(h.name);
      if (name === undefined) throw new PolicyRefusedError(`archive entry ${JSON.stringify(h.name)} is refused: absolute names and ".." segments are not allowed`);
      if (h.type === 'symlink' || h.type === 'hardlink' || h.type === 'other') {
        throw new PolicyRefusedError(`archive entry ${JSON.stringify(h.name)} is a ${h.type === 'other' ? `special file (type ${JSON.stringify(h.typeName)})` : h.type}; uploads carry only files and folders`);
      }
      if (name === '') return undefined;
      if (h.type === 'dir') {
        entries.push({ name, type: 'dir', mode: carriedMode(h.mode), data: undefined });
        return undefined;
      }
      total += h.size;
      if (total > maxBytes) throw tooMany();
      const parts: Buffer[] = [];
      return {
        write: (c: Buffer) => void parts.push(Buffer.from(c)),
        end: () => void entries.push({ name, type: 'file', mode: carriedMode(h.mode), data: Buffer.concat(parts) }),
      };
    });
  } catch (err) {
    if (err instanceof TarFormatError) throw new UsageError(`the upload is not a valid tar archive: ${err.message}`);
    throw err;
  }
  return entries;
}

/**
 * Extracts a tar of files and folders under `dir` in the sandbox (created if missing). The
 * archive is parsed and re-written by berth: only files and dirs with safe names reach the
 * sandbox's tar, and no entry may land through a symlink or on a refused path.
 */
export async function uploadTarball(ctx: TransferContext, a: { dir: string; tar: Buffer }): Promise<{ dir: string; entries: number }> {
  if (!Buffer.isBuffer(a.tar)) throw new UsageError('upload tar must be a Buffer');
  const r = await resolveOne(ctx, a.dir);
  assertSandboxPath(r.asked, r.real, ctx.policy);
  if (r.kind === 'file' || r.kind === 'other') throw new UsageError(`sandbox path ${JSON.stringify(r.asked)} is not a directory; name the folder to extract into`);
  const entries = await parseUploadTar(a.tar, ctx.maxBytes);
  const targets = new Set<string>();
  for (const e of entries) {
    const p = posix.join(r.real, e.name);
    const reason = sandboxPathRefusal(p, ctx.policy);
    if (reason !== undefined) throw new PolicyRefusedError(`archive entry ${JSON.stringify(e.name)} would be written to ${JSON.stringify(p)}, which ${reason}`);
    const parts = e.name.split('/');
    for (let i = 1; i <= parts.length; i++) targets.add(posix.join(r.real, ...parts.slice(0, i)));
  }
  // Nothing may be written through a symlink that already exists in the sandbox.
  if (r.kind === 'dir' && targets.size > 0) {
    for (const t of await resolveInSandbox(ctx.sandbox, [...targets])) {
      if (t.kind === 'dangling' || t.real !== t.asked) {
        throw new PolicyRefusedError(`archive entry path ${JSON.stringify(t.asked)} is a symlink in the sandbox (to ${JSON.stringify(t.real)}); uploads never write through symlinks`);
      }
      if (t.kind === 'other') throw new PolicyRefusedError(`archive entry path ${JSON.stringify(t.asked)} is a special file in the sandbox; refusing to write over it`);
    }
  }
  const { base, missing } = splitExisting(r);
  const prefix = missing.join('/');
  const out: TarWriteEntry[] = [];
  for (let i = 1; i <= missing.length; i++) out.push({ name: missing.slice(0, i).join('/'), type: 'dir', mode: 0o755 });
  for (const e of entries) {
    const name = prefix === '' ? e.name : `${prefix}/${e.name}`;
    out.push(e.type === 'dir' ? { name, type: 'dir', mode: e.mode } : { name, type: 'file', mode: e.mode, data: e.data });
  }
  if (out.length === 0) return { dir: r.real, entries: 0 };
  await ctx.sandbox.putArchive(base, await writeTar(out));
  return { dir: r.real, entries: entries.length };
}

/** Reads one file into memory, bounded by `maxBytes` (never above `files.maxBytes`). */
export async function readSandboxFile(ctx: TransferContext, a: { path: string; maxBytes?: number }): Promise<{ path: string; data: Buffer }> {
  const cap = capOf(ctx, a.maxBytes);
  const limit = cap.limit;
  const r = await resolveOne(ctx, a.path);
  requireExisting(ctx, r, 'file');
  if (r.size > limit) throw tooLarge(`sandbox file ${JSON.stringify(r.asked)} (${r.size} bytes)`, cap);
  const stream = await ctx.sandbox.getArchive(r.real);
  const parts: Buffer[] = [];
  let bytes = 0;
  let found = false;
  try {
    await readTar(stream, (h) => {
      if (found || h.type !== 'file') return undefined;
      found = true;
      return {
        write: (c: Buffer) => {
          bytes += c.length;
          if (bytes > limit) throw tooLarge(`sandbox file ${JSON.stringify(r.asked)}`, cap);
          parts.push(Buffer.from(c));
        },
        end: () => undefined,
      };
    });
  } catch (err) {
    stream.destroy();
    throw asTransferError(err, r.real, ctx.sandbox.name);
  }
  if (!found) throw new BerthError('transfer_failed', `the sandbox's archive of ${JSON.stringify(r.real)} held no file`);
  // Read content goes back to the caller (and onward to a model), like command output: redacted.
  const redactor = new ByteRedactor(ctx.redactValues ?? []);
  return { path: r.real, data: Buffer.concat([redactor.push(Buffer.concat(parts)), redactor.flush()]) };
}

function asTransferError(err: unknown, path: string, sandbox: string): unknown {
  if (err instanceof TarFormatError) return new BerthError('transfer_failed', `reading ${JSON.stringify(path)} from sandbox ${sandbox}: ${err.message}`);
  return err;
}

/**
 * Copies a file or folder out of the sandbox into a fresh dir under the scope's staging dir.
 * Written to a `.partial-*` dir first and renamed when complete: a failure (cap, refusal, a
 * broken stream) leaves nothing behind. Symlinks and special files inside a folder are not
 * materialised on the host, and berth's own files and credential dirs inside it are skipped.
 *
 * Every archive entry costs 512 bytes (its tar header) besides its content, against the cap and
 * against the tenant's staging bound (`limits.stagingBytes`): many empty files are not free.
 *
 * The copy goes to a caller as a read does (a download route, a gateway's attachment, `berth cp`),
 * so granted secret values in its files are redacted the same way: no route hands back what
 * another one hides. The cap counts the sandbox's bytes; `bytes` is what was written.
 */
export async function exportToStaging(ctx: TransferContext, a: { path: string; maxBytes?: number }): Promise<{ hostPath: string; bytes: number; kind: 'file' | 'dir' }> {
  const cap = capOf(ctx, a.maxBytes);
  const limit = cap.limit;
  const r = await resolveOne(ctx, a.path);
  requireExisting(ctx, r, 'file-or-dir');
  const kind = r.kind === 'dir' ? 'dir' : 'file';
  const what = `export of ${JSON.stringify(r.asked)}`;
  if (r.size >= 0 && r.size + ENTRY_BYTES > limit) throw tooLarge(`sandbox file ${JSON.stringify(r.asked)} (${r.size} bytes, plus ${ENTRY_BYTES} for its entry)`, cap);
  const base = posix.basename(r.real);
  const parent = posix.dirname(r.real);
  const staging = await ctx.staging();
  const lease = await ctx.stagingLease();
  let tmp: string | undefined;
  let stream: Readable | undefined;
  /** Content bytes written (the result). */
  let bytes = 0;
  /** What counts against the cap and the staging bound: content plus one header per entry. */
  let charged = 0;
  let entries = 0;
  const charge = (n: number): void => {
    charged += n;
    if (charged > limit) throw tooLarge(`${what} (over ${charged} bytes, counting ${ENTRY_BYTES} bytes for each of its ${entries} entries so far)`, cap);
    lease.add(n, what);
  };
  let skipped = 0;
  let open_: FileHandle | undefined;
  const written = new Set<string>();
  try {
    tmp = await mkdtemp(join(staging, lease.partialPrefix));
    const into = tmp;
    stream = await ctx.sandbox.getArchive(r.real);
    await readTar(stream, async (h) => {
      entries++;
      charge(ENTRY_BYTES);
      const name = cleanEntryName(h.name);
      if (name === undefined || (name !== '' && name !== base && !name.startsWith(`${base}/`))) {
        throw new BerthError('transfer_failed', `the sandbox's archive of ${JSON.stringify(r.real)} has an unexpected entry ${JSON.stringify(h.name)}`);
      }
      if (name === '' || sandboxPathRefusal(posix.join(parent, name), ctx.policy) !== undefined) {
        if (name !== '') skipped++;
        return undefined;
      }
      const hostPath = join(into, ...name.split('/'));
      if (h.type === 'dir') {
        await mkdir(hostPath, { recursive: true, mode: stagedMode(h.mode, true) });
        return undefined;
      }
      if (h.type === 'hardlink') {
        const target = cleanEntryName(h.linkName);
        if (target !== undefined && written.has(target)) {
          const targetPath = join(into, ...target.split('/'));
          const size = (await stat(targetPath)).size;
          charge(size);
          await mkdir(dirname(hostPath), { recursive: true, mode: 0o700 });
          await copyFile(targetPath, hostPath);
          bytes += size;
          written.add(name);
        } else {
          skipped++;
        }
        return undefined;
      }
      if (h.type !== 'file') {
        skipped++;
        return undefined;
      }
      if (charged + h.size > limit) throw tooLarge(`${what} (over ${charged + h.size} bytes, counting ${ENTRY_BYTES} bytes for each of its ${entries} entries so far)`, cap);
      await mkdir(dirname(hostPath), { recursive: true, mode: 0o700 });
      await rm(hostPath, { force: true });
      const fh = await open(hostPath, 'wx', stagedMode(h.mode, false));
      open_ = fh;
      const redactor = new ByteRedactor(ctx.redactValues ?? []);
      const put = async (b: Buffer): Promise<void> => {
        bytes += b.length;
        if (b.length > 0) await fh.write(b);
      };
      return {
        write: async (c: Buffer) => {
          charge(c.length);
          await put(redactor.push(c));
        },
        end: async () => {
          await put(redactor.flush());
          open_ = undefined;
          await fh.close();
          written.add(name);
        },
      };
    });
    if (!written.has(base) && kind === 'file') {
      throw new BerthError('transfer_failed', `the sandbox's archive of ${JSON.stringify(r.real)} held no file`);
    }
    if (kind === 'dir') await mkdir(join(into, base), { recursive: true, mode: 0o700 });
    const final = join(staging, lease.committedName());
    await rename(into, final);
    lease.commit();
    if (skipped > 0) ctx.log?.(`export ${r.real}: ${skipped} entries skipped (symlinks, special files, berth's own or credential paths)`);
    return { hostPath: join(final, base), bytes, kind };
  } catch (err) {
    // Before the cleanup awaits: a concurrent export must not be refused for bytes about to go.
    lease.release();
    stream?.destroy();
    await open_?.close().catch(() => undefined);
    if (tmp !== undefined) await rm(tmp, { recursive: true, force: true });
    throw asTransferError(err, r.real, ctx.sandbox.name);
  } finally {
    lease.release();
  }
}

/**
 * The host path of a file an agent names in its sandbox, for a gateway to attach.
 *
 * By default (`mediaMode: copy`) a copy exported into the scope's staging dir: berth wrote it from
 * the sandbox's archive stream, the sandbox cannot reach it, and it stays what it was. `live` (an
 * explicit opt-in) returns the file itself when the sandbox keeps it on a host dir (its own bind,
 * attached workspace or volume; every file on `local`): no copy, but the agent can replace that
 * path with a symlink to any host file between this check and the gateway's read.
 */
export async function mediaHostPath(ctx: TransferContext, sandboxPath: string): Promise<{ hostPath: string; exported: boolean }> {
  const r = await resolveOne(ctx, sandboxPath);
  requireExisting(ctx, r, 'file');
  const live = ctx.mediaMode === 'live' ? await liveHostPath(ctx, r) : undefined;
  if (live !== undefined) return { hostPath: live, exported: false };
  const e = await exportToStaging(ctx, { path: r.real });
  return { hostPath: e.hostPath, exported: true };
}

/** The file's host path under the sandbox's host dir, checked once (`mediaMode: live` only). */
async function liveHostPath(ctx: TransferContext, r: ResolvedPath): Promise<string | undefined> {
  const mapped = ctx.sandbox.hostPathOf(r.real);
  if (mapped === undefined) return undefined;
  const hostReal = await realpath(mapped.hostPath).catch(() => undefined);
  if (hostReal === undefined) return undefined;
  const rootReal = await realpath(mapped.hostRoot).catch(() => mapped.hostRoot);
  if (hostReal !== rootReal && !hostReal.startsWith(rootReal.endsWith(sep) ? rootReal : rootReal + sep)) {
    throw new PolicyRefusedError(`sandbox path ${JSON.stringify(r.asked)} maps to host ${JSON.stringify(hostReal)}, outside the sandbox's host dir ${JSON.stringify(rootReal)}`);
  }
  return (await stat(hostReal)).isFile() ? hostReal : undefined;
}
