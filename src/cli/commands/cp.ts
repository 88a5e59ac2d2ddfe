import { cp, lstat, readdir, readFile, rm, stat } from 'node:fs/promises';
import { basename, dirname, join, posix, resolve } from 'node:path';
import type { Broker } from '../../broker/broker.js';
import { UsageError } from '../../errors.js';
import { writeTar, type TarWriteEntry } from '../../files/tar.js';
import { COMMON_OPTIONS, parseFlags, SCOPE_HELP, SCOPE_OPTIONS, scopeFromFlags } from '../args.js';
import type { CliIo } from '../io.js';
import { withBroker } from '../with-broker.js';

/** The prefix that marks the sandbox side of `berth cp`. */
const SANDBOX_PREFIX = 'sandbox:';

const CP_HELP = `usage: berth cp [scope flags] [--json] SRC DEST

Copies a file or folder between the host and the call's sandbox. The sandbox side is written
with the prefix "sandbox:" (a host path that really starts with "sandbox:" is written ./sandbox:...).
A relative sandbox path starts at the session's current directory.

  berth cp --session s1 report.pdf sandbox:/workspace/       upload into a folder
  berth cp --session s1 ./data sandbox:/workspace/data        upload a folder (as a tar)
  berth cp --session s1 sandbox:/workspace/out.png ./         download a file
  berth cp --session s1 sandbox:/workspace/results ./results  download a folder

Paths inside the sandbox are resolved there, symlinks followed: only the workspace, the home
and /tmp are allowed; "..", /proc, credential dirs (~/.ssh, ~/.aws, ...) and berth's own files
are refused (exit 125). Transfers over files.maxBytes are refused and leave nothing behind.

${SCOPE_HELP}
  --json              print one single-line JSON result on stdout`;

export async function cpCommand(argv: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseFlags('cp', argv, { ...SCOPE_OPTIONS, ...COMMON_OPTIONS, json: { type: 'boolean' } });
  if (values.help) {
    io.out(`${CP_HELP}\n`);
    return 0;
  }
  if (positionals.length !== 2) throw new UsageError('berth cp needs SRC and DEST, one of them prefixed with "sandbox:", e.g. berth cp --session s1 a.txt sandbox:/workspace/');
  const [src, dest] = positionals as [string, string];
  const srcIn = src.startsWith(SANDBOX_PREFIX);
  const destIn = dest.startsWith(SANDBOX_PREFIX);
  if (srcIn === destIn) {
    throw new UsageError(`berth cp copies between the host and the sandbox: prefix exactly one of SRC and DEST with "${SANDBOX_PREFIX}"`);
  }
  const scope = scopeFromFlags(values, io.env, io.cwd);
  return withBroker(io, values.config, async (broker) => {
    const result = destIn
      ? await upload(broker, scope, resolve(io.cwd, src), dest.slice(SANDBOX_PREFIX.length))
      : await download(broker, scope, src.slice(SANDBOX_PREFIX.length), resolve(io.cwd, dest));
    if (values.json) io.out(`${JSON.stringify(result)}\n`);
    return 0;
  });
}

type Scope = ReturnType<typeof scopeFromFlags>;

async function upload(broker: Broker, scope: Scope, hostPath: string, sandboxPath: string): Promise<Record<string, unknown>> {
  const st = await stat(hostPath).catch(() => undefined);
  if (st === undefined) throw new UsageError(`host path ${JSON.stringify(hostPath)} does not exist`);
  if (sandboxPath === '') throw new UsageError('the sandbox path after "sandbox:" is empty; e.g. sandbox:/workspace/');
  if (st.isDirectory()) {
    // A trailing slash means "into this folder"; otherwise DEST names the folder itself.
    const into = sandboxPath.endsWith('/');
    const top = into ? basename(hostPath) : posix.basename(sandboxPath);
    const dir = into ? sandboxPath : posix.dirname(sandboxPath);
    const r = await broker.files.uploadTar(scope, { dir, tar: await writeTar(await walk(hostPath, top)) });
    return { direction: 'upload', kind: 'dir', path: posix.join(r.dir, top), entries: r.entries };
  }
  if (!st.isFile()) throw new UsageError(`host path ${JSON.stringify(hostPath)} is not a file or folder`);
  const data = await readFile(hostPath);
  const mode = st.mode & 0o777;
  const target = sandboxPath.endsWith('/') ? `${sandboxPath}${basename(hostPath)}` : sandboxPath;
  try {
    const r = await broker.files.upload(scope, { path: target, data, mode });
    return { direction: 'upload', kind: 'file', path: r.path, bytes: r.bytes };
  } catch (err) {
    // `cp a.txt sandbox:/workspace` means into that folder, as cp does.
    if (err instanceof UsageError && / is a directory;/.test(err.message) && !sandboxPath.endsWith('/')) {
      const r = await broker.files.upload(scope, { path: `${sandboxPath}/${basename(hostPath)}`, data, mode });
      return { direction: 'upload', kind: 'file', path: r.path, bytes: r.bytes };
    }
    throw err;
  }
}

/** A host folder as tar entries under `top`; symlinks and special files are refused, not followed. */
async function walk(dir: string, top: string): Promise<TarWriteEntry[]> {
  const out: TarWriteEntry[] = [{ name: top, type: 'dir', mode: (await stat(dir)).mode & 0o777 }];
  for (const name of (await readdir(dir)).sort()) {
    const p = join(dir, name);
    const st = await lstat(p);
    const entry = `${top}/${name}`;
    if (st.isDirectory()) out.push(...(await walk(p, entry)));
    else if (st.isFile()) out.push({ name: entry, type: 'file', mode: st.mode & 0o777, data: await readFile(p), mtimeMs: st.mtimeMs });
    else throw new UsageError(`host path ${JSON.stringify(p)} is a symlink or special file; berth cp copies only files and folders`);
  }
  return out;
}

async function download(broker: Broker, scope: Scope, sandboxPath: string, hostDest: string): Promise<Record<string, unknown>> {
  if (sandboxPath === '') throw new UsageError('the sandbox path after "sandbox:" is empty; e.g. sandbox:/workspace/out.txt');
  const destStat = await stat(hostDest).catch(() => undefined);
  if (destStat === undefined && !(await stat(dirname(hostDest)).catch(() => undefined))?.isDirectory()) {
    throw new UsageError(`host folder ${JSON.stringify(dirname(hostDest))} does not exist`);
  }
  const r = await broker.files.exportPath(scope, { path: sandboxPath });
  try {
    const target = destStat?.isDirectory() ? join(hostDest, basename(r.hostPath)) : hostDest;
    await cp(r.hostPath, target, { recursive: true, force: true, errorOnExist: false });
    return { direction: 'download', kind: r.kind, path: target, bytes: r.bytes };
  } finally {
    // The staged copy was only a stop on the way.
    await rm(dirname(r.hostPath), { recursive: true, force: true });
  }
}
