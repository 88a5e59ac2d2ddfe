import { posix } from 'node:path';
import { PolicyRefusedError } from '../errors.js';

/** What file transfer may touch inside one sandbox. All paths absolute, in the sandbox's view. */
export interface SandboxPathPolicy {
  /** Roots files may be read from or written to: the workspace, the home, scratch. */
  roots: readonly string[];
  /** The sandbox user's home: credential dirs under it are refused. */
  home: string;
  /** berth's own files inside the sandbox (shell snapshots, job output). */
  berthDirs: readonly string[];
}

/** Kernel and process interfaces: environments of other processes, devices. Never transferred. */
const SYSTEM_PREFIXES = ['/proc', '/sys', '/dev'];
/** Credential files and dirs outside any home. */
const SYSTEM_CREDENTIALS = [
  '/etc/shadow', '/etc/gshadow', '/etc/shadow-', '/etc/gshadow-', '/etc/sudoers', '/etc/sudoers.d', '/etc/ssh',
  '/etc/ssl/private', '/run/secrets', '/var/run/secrets', '/var/run/docker.sock', '/run/docker.sock',
];
/** Under the home: where tools keep keys and tokens. */
const HOME_CREDENTIALS = [
  '.ssh', '.aws', '.gnupg', '.docker', '.kube', '.azure', '.password-store', '.netrc', '.git-credentials',
  '.npmrc', '.pypirc', '.config/gh', '.config/hub', '.config/gcloud', '.config/git/credentials', '.config/op',
];

function under(p: string, root: string): boolean {
  return p === root || p.startsWith(root === '/' ? '/' : `${root}/`);
}

/**
 * An absolute, lexically clean in-sandbox path from what a caller wrote: relative paths are
 * taken from `cwd`. Refuses `..` anywhere (even where it would stay inside: name the file
 * directly), empty paths and NUL bytes.
 *
 * @example
 * normalizeSandboxPath('out/chart.png', '/workspace') // '/workspace/out/chart.png'
 * normalizeSandboxPath('../etc/passwd', '/workspace') // throws PolicyRefusedError
 */
export function normalizeSandboxPath(path: string, cwd: string): string {
  if (typeof path !== 'string' || path === '') throw new PolicyRefusedError('a sandbox path is required, e.g. /workspace/out.txt');
  if (path.includes('\0')) throw new PolicyRefusedError(`sandbox path ${JSON.stringify(path)} contains a NUL byte`);
  if (path.split('/').includes('..')) {
    throw new PolicyRefusedError(`sandbox path ${JSON.stringify(path)} is refused: ".." segments are not allowed; name the file by its full path`);
  }
  const abs = path.startsWith('/') ? path : posix.join(cwd, path);
  const clean = posix.normalize(abs);
  return clean.length > 1 && clean.endsWith('/') ? clean.slice(0, -1) : clean;
}

/**
 * Why a real (symlink-free, absolute, clean) in-sandbox path may not be transferred, or
 * undefined when it may. Specific rules come first so the message names the one that applies.
 *
 * @example
 * sandboxPathRefusal('/proc/self/environ', policy) // 'is under /proc (process and kernel interfaces are never transferred)'
 */
export function sandboxPathRefusal(realPath: string, policy: SandboxPathPolicy): string | undefined {
  if (!realPath.startsWith('/') || posix.normalize(realPath) !== realPath) {
    return 'is not an absolute, clean path';
  }
  for (const p of SYSTEM_PREFIXES) {
    if (under(realPath, p)) return `is under ${p} (process and kernel interfaces are never transferred)`;
  }
  for (const p of SYSTEM_CREDENTIALS) {
    if (under(realPath, p)) return `is a credential location (${p})`;
  }
  for (const d of policy.berthDirs) {
    if (under(realPath, d)) return `is berth's own state in the sandbox (${d}: shell snapshots, job output)`;
  }
  for (const c of HOME_CREDENTIALS) {
    const p = posix.join(policy.home, c);
    if (under(realPath, p)) return `is a credential location (~/${c})`;
  }
  if (!policy.roots.some((r) => under(realPath, r))) {
    return `is outside the sandbox's file roots (${policy.roots.join(', ')})`;
  }
  return undefined;
}

/**
 * Throws `PolicyRefusedError` naming the path (as asked and as resolved) and the rule.
 */
export function assertSandboxPath(asked: string, realPath: string, policy: SandboxPathPolicy): void {
  const reason = sandboxPathRefusal(realPath, policy);
  if (reason === undefined) return;
  const shown = asked === realPath ? JSON.stringify(asked) : `${JSON.stringify(asked)} (resolves to ${JSON.stringify(realPath)})`;
  throw new PolicyRefusedError(`sandbox path ${shown} ${reason}; transfer files under ${policy.roots.join(', ')} instead`);
}

/**
 * A tar entry name made safe to join under a base: `./` and trailing `/` dropped; `''` for the
 * archive's own root entry (`.`, `./`); undefined for absolute names and `..` segments.
 */
export function cleanEntryName(name: string): string | undefined {
  if (name.startsWith('/') || name.includes('\0')) return undefined;
  const parts = name.split('/').filter((s) => s !== '' && s !== '.');
  if (parts.includes('..')) return undefined;
  return parts.join('/');
}
