import type { Sandbox } from '../backends/backend.js';
import { BerthError } from '../errors.js';

/** A path as the sandbox itself sees it, with every symlink followed. */
export interface ResolvedPath {
  /** The path asked for (absolute, lexically clean). */
  asked: string;
  /** `missing`: the path (or a parent) does not exist; `dangling`: a symlink on it points nowhere. */
  kind: 'file' | 'dir' | 'other' | 'missing' | 'dangling';
  /** The real path: the existing part resolved, plus the missing rest as written. */
  real: string;
  /** The part that does not exist yet (`''` when the whole path exists), as `/a/b`. */
  missing: string;
  /** Size in bytes of a file, or -1. */
  size: number;
}

/*
 * Runs inside the sandbox (busybox or GNU sh, readlink, stat), so symlinks are followed exactly as
 * the agent's own commands see them. For each argument: climb to the longest existing prefix,
 * resolve it with `readlink -f`, and print kind, real path, missing rest and size, NUL-separated.
 */
const RESOLVE_SCRIPT = `
for p do
  rest=
  while [ ! -e "$p" ] && [ ! -L "$p" ]; do
    rest="/\${p##*/}$rest"
    p=\${p%/*}
    [ -n "$p" ] || p=/
  done
  if [ -L "$p" ] && [ ! -e "$p" ]; then printf 'dangling\\0%s\\0%s\\0-1\\0' "$p" "$rest"; continue; fi
  r=$(readlink -f -- "$p" 2>/dev/null) || r=
  if [ -z "$r" ]; then printf 'dangling\\0%s\\0%s\\0-1\\0' "$p" "$rest"; continue; fi
  s=-1
  if [ -n "$rest" ]; then k=missing
  elif [ -d "$r" ]; then k=dir
  elif [ -f "$r" ]; then k=file; s=$(stat -c %s -- "$r" 2>/dev/null) || s=-1
  else k=other; fi
  printf '%s\\0%s\\0%s\\0%s\\0' "$k" "$r" "$rest" "$s"
done
`;

const BATCH = 200;
const RESOLVE_TIMEOUT_MS = 30_000;

/**
 * Most a batch's answer can be: per path its missing rest (at most the path as asked), a real path
 * (readlink -f of an existing prefix: within PATH_MAX, 16 KiB is ample), kind, size and NULs; plus
 * room for stderr. Anything bigger is not the script talking (a replaced `sh`).
 */
function resolveOutputBound(batch: readonly string[]): number {
  let n = 64 * 1024;
  for (const p of batch) n += Buffer.byteLength(p) + 16 * 1024 + 64;
  return n;
}

/**
 * Resolves absolute, clean paths inside the sandbox (one helper exec per 200 paths).
 *
 * @example
 * const [r] = await resolveInSandbox(sandbox, ['/workspace/link']);
 * // { asked: '/workspace/link', kind: 'file', real: '/etc/passwd', missing: '', size: 1234 }
 */
export async function resolveInSandbox(sandbox: Sandbox, paths: readonly string[]): Promise<ResolvedPath[]> {
  const out: ResolvedPath[] = [];
  for (let i = 0; i < paths.length; i += BATCH) {
    const batch = paths.slice(i, i + BATCH);
    const r = await sandbox.execOnce(['sh', '-c', RESOLVE_SCRIPT, 'berth-resolve', ...batch], {
      timeoutMs: RESOLVE_TIMEOUT_MS,
      maxOutputBytes: resolveOutputBound(batch),
    });
    const fields = r.stdout.toString('utf8').split('\0');
    if (r.exitCode !== 0 || fields.length < batch.length * 4) {
      throw new BerthError('transfer_failed', `could not resolve paths inside sandbox ${sandbox.name} (exit ${r.exitCode}): ${r.stderr.toString('utf8').trim() || 'no output'}`);
    }
    batch.forEach((asked, j) => {
      const [kind, base, missing, size] = fields.slice(j * 4, j * 4 + 4) as [ResolvedPath['kind'], string, string, string];
      const real = missing === '' ? base : base === '/' ? missing : `${base}${missing}`;
      out.push({ asked, kind, real, missing, size: Number(size) });
    });
  }
  return out;
}
