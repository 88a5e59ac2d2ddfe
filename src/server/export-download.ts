import { constants, type Stats } from 'node:fs';
import { lstat, open, readdir, type FileHandle } from 'node:fs/promises';
import type { ServerResponse } from 'node:http';
import { basename, dirname, join, relative, sep } from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { sessionRefOf } from '../broker/resolve-call.js';
import { stagingDirFor } from '../files/staging.js';
import { tarStream, type TarStreamEntry } from '../files/tar.js';
import { DEFAULT_PROFILE, type CallScope } from '../scope/call-scope.js';
import { HttpError } from './http-error.js';

/*
 * Exports for remote callers (docs/design.md §8: host paths only for local callers). An export already
 * lands in a fresh random dir under the call scope's private staging dir
 * (`staging/<tenant>/<session>/<user>/<16 hex>-<bytes>/<name>`, see files/staging-quota.ts); its
 * 16 hex digits are the export id, and
 * `GET /v1/files/exports/<id>` streams what it holds. The id is looked up only under the calling
 * scope's own staging dir (another tenant, profile, session or user finds nothing), must be
 * exactly 16 hex digits, and no symlink is followed on the way or inside.
 */

const EXPORT_ID_RE = /^[0-9a-f]{16}$/;
/** A finished export's dir: `<id>-<bytes it counts against the staging bound>`. */
const EXPORT_DIR_RE = /^([0-9a-f]{16})-[0-9]+$/;

/** The id of an export from the host path `exportToStaging` answered. */
export function exportIdOf(hostPath: string): string {
  const m = EXPORT_DIR_RE.exec(basename(dirname(hostPath)));
  if (m === null) throw new Error(`export path ${hostPath} is not under an export dir`);
  return m[1] as string;
}

/** The dir of export `id` among the names in a scope's staging dir, if one is there. */
function exportDirName(names: readonly string[], id: string): string | undefined {
  return names.find((n) => EXPORT_DIR_RE.exec(n)?.[1] === id);
}

/** The download route of an export, with the scope fields that find it again. */
export function downloadRoute(exportId: string, scope: CallScope): string {
  const fields: [string, string | undefined][] = [
    ['profile', scope.profile === DEFAULT_PROFILE ? undefined : scope.profile], ['session', scope.session], ['task', scope.task], ['user', scope.user],
  ];
  const query = fields.filter(([, v]) => v !== undefined).map(([k, v]) => `${k}=${encodeURIComponent(v as string)}`).join('&');
  return `/v1/files/exports/${exportId}${query === '' ? '' : `?${query}`}`;
}

function notFound(id: string): HttpError {
  return new HttpError('not_found', `no export ${id} in this session (exports are removed when their session closes); export again with POST /v1/files/export`);
}

async function lstatOrUndefined(path: string): Promise<Stats | undefined> {
  return lstat(path).catch(() => undefined);
}

/** Every dir from `berthHome` (exclusive) down to `dir` must be a plain dir, not a symlink. */
async function plainDirs(berthHome: string, dir: string): Promise<boolean> {
  let cur = berthHome;
  for (const part of relative(berthHome, dir).split(sep)) {
    cur = join(cur, part);
    const st = await lstatOrUndefined(cur);
    if (st === undefined || !st.isDirectory()) return false;
  }
  return true;
}

/** Opens a regular file without following a symlink at its last component. */
async function openPlainFile(path: string): Promise<{ fh: FileHandle; size: number; mode: number; mtimeMs: number } | undefined> {
  const fh = await open(path, constants.O_RDONLY | constants.O_NOFOLLOW).catch(() => undefined);
  if (fh === undefined) return undefined;
  const st = await fh.stat();
  if (!st.isFile()) {
    await fh.close();
    return undefined;
  }
  return { fh, size: st.size, mode: st.mode, mtimeMs: st.mtimeMs };
}

/** Exactly `size` bytes of a file (zero-filled if it shrank meanwhile): the tar header promised that many. */
async function* fileBytes(fh: FileHandle, size: number): AsyncGenerator<Buffer> {
  const chunk = Buffer.alloc(64 * 1024);
  let at = 0;
  while (at < size) {
    const { bytesRead } = await fh.read(chunk, 0, Math.min(chunk.length, size - at), at);
    if (bytesRead === 0) {
      yield Buffer.alloc(size - at);
      return;
    }
    yield Buffer.from(chunk.subarray(0, bytesRead));
    at += bytesRead;
  }
}

/**
 * A folder's entries for a tar stream: files and dirs only (symlinks and special files are left
 * out), sorted by name. Each file stays open only while its content is read.
 */
async function* entriesOf(dir: string, name: string, st: Stats): AsyncGenerator<TarStreamEntry> {
  yield { name, type: 'dir', mode: st.mode, mtimeMs: st.mtimeMs };
  for (const entry of (await readdir(dir)).sort()) {
    const path = join(dir, entry);
    const child = await lstatOrUndefined(path);
    if (child?.isDirectory()) {
      yield* entriesOf(path, `${name}/${entry}`, child);
    } else if (child?.isFile()) {
      const f = await openPlainFile(path);
      if (f === undefined) continue;
      try {
        yield { name: `${name}/${entry}`, type: 'file', mode: f.mode, mtimeMs: f.mtimeMs, size: f.size, content: fileBytes(f.fh, f.size) };
      } finally {
        await f.fh.close();
      }
    }
  }
}

/**
 * Streams export `id` of `scope` into `res`: a file as its bytes (application/octet-stream), a
 * folder as a tar (application/x-tar).
 *
 * @throws HttpError 404 when the scope's staging dir holds no such export (or it is not a plain file or folder).
 */
export async function sendExport(res: ServerResponse, berthHome: string, scope: CallScope, id: string): Promise<void> {
  if (!EXPORT_ID_RE.test(id)) throw new HttpError('bad_request', `${JSON.stringify(id)} is not an export id (16 hex digits, from POST /v1/files/export)`);
  const staging = stagingDirFor(berthHome, { tenant: scope.tenant, profile: scope.profile, user: scope.user, sessionRef: sessionRefOf(scope) });
  const dirName = exportDirName(await readdir(staging).catch(() => []), id);
  if (dirName === undefined) throw notFound(id);
  const dir = join(staging, dirName);
  if (!(await plainDirs(berthHome, dir))) throw notFound(id);
  const names = await readdir(dir).catch(() => []);
  if (names.length !== 1) throw notFound(id);
  const name = names[0] as string;
  const path = join(dir, name);
  const st = await lstatOrUndefined(path);
  // RFC 5987 attr-chars only: encodeURIComponent leaves ' ( ) * as they are.
  const disposition = `attachment; filename*=UTF-8''${encodeURIComponent(name).replace(/['()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`)}`;
  if (st?.isFile()) {
    const f = await openPlainFile(path);
    if (f === undefined) throw notFound(id);
    try {
      res.writeHead(200, {
        'content-type': 'application/octet-stream', 'content-length': String(f.size), 'content-disposition': disposition,
        'x-berth-kind': 'file', 'cache-control': 'no-store',
      });
      await pipeline(Readable.from(fileBytes(f.fh, f.size)), res);
    } finally {
      await f.fh.close();
    }
    return;
  }
  if (!st?.isDirectory()) throw notFound(id);
  res.writeHead(200, {
    'content-type': 'application/x-tar', 'content-disposition': `${disposition}.tar`, 'x-berth-kind': 'dir', 'cache-control': 'no-store',
  });
  await pipeline(Readable.from(tarStream(entriesOf(path, name, st))), res);
}
