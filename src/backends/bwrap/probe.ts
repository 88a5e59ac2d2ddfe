import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { accessSync, constants, statSync } from 'node:fs';
import { delimiter, isAbsolute, join } from 'node:path';
import { BackendUnavailableError, isBerthError } from '../../errors.js';
import { diagnoseStartFailure, readHostFacts, type HostFacts } from './host-facts.js';
import { startSandbox } from './sandbox.js';
import { createSandboxDirs, removeSandboxDirs, sandboxDirs } from './sandbox-dirs.js';
import { hostSystemPaths, type SystemPath } from './system-paths.js';

/** What start-up learnt about this host, for every sandbox after. */
export interface BwrapHost {
  bwrapPath: string;
  version: string;
  /** bash as sandboxes see it (the host's, bound read-only). */
  bashPath: string;
  systemPaths: SystemPath[];
}

export interface ProbeOptions {
  /** Configured bwrap; default: `bwrap` on PATH. */
  bwrapPath?: string | undefined;
  /** A prepared sandbox root (prepareRoot). */
  root: string;
  /** The unprivileged uid to probe as (one of the range); undefined: berth's own (berth is not root). */
  user: { uid: number; gid: number } | undefined;
  /** The filter sandboxes will get; undefined only when the operator turned it off. */
  seccomp: Buffer | undefined;
  /** For tests: the host's settings. */
  facts?: HostFacts;
}

const MIN_VERSION = [0, 8, 0] as const;
const PROBE_TIMEOUT_MS = 15_000;

/**
 * Start-up check: bwrap exists and is new enough, and a real sandbox starts as `user` with user,
 * pid and mount namespaces, a fresh /proc, no capabilities and the syscall filter in force. Any
 * failure is a BackendUnavailableError (exit 125) that names what is missing and how to fix it;
 * there is no fallback to running unsandboxed.
 */
export async function probeBwrap(opts: ProbeOptions): Promise<BwrapHost> {
  const bwrapPath = findBwrap(opts.bwrapPath);
  const version = await bwrapVersion(bwrapPath);
  const bashPath = ['/usr/bin/bash', '/bin/bash'].find((p) => isExecutable(p));
  if (bashPath === undefined) throw new BackendUnavailableError('bwrap sandboxes run bash, and this host has none at /usr/bin/bash or /bin/bash: install bash');
  const host: BwrapHost = { bwrapPath, version, bashPath, systemPaths: hostSystemPaths() };
  const dirs = sandboxDirs(opts.root, `.probe-${randomBytes(6).toString('hex')}`);
  try {
    createSandboxDirs(dirs, opts.user);
    await checkSandbox(host, dirs, opts);
  } catch (err) {
    // What the probe found is the answer; a failure to clean up after it must not replace it.
    try {
      removeSandboxDirs(opts.root, dirs);
    } catch {
      // A .probe- dir left under the root: harmless (no record names it), and the next probe uses a new name.
    }
    throw err;
  }
  removeSandboxDirs(opts.root, dirs);
  return host;
}

function findBwrap(configured: string | undefined): string {
  const candidates = configured !== undefined && isAbsolute(configured)
    ? [configured]
    : (process.env['PATH'] ?? '/usr/bin:/bin').split(delimiter).filter((d) => d !== '').map((d) => join(d, configured ?? 'bwrap'));
  const found = candidates.find((p) => isExecutable(p));
  if (found !== undefined) return found;
  throw new BackendUnavailableError(
    `bubblewrap (${configured ?? 'bwrap'}) is not installed${configured === undefined ? ' on PATH' : ''}: install it ` +
      '(Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap; Alpine: apk add bubblewrap) or set bwrap.path',
  );
}

function isExecutable(path: string): boolean {
  try {
    accessSync(path, constants.X_OK);
    return statSync(path).isFile();
  } catch {
    return false;
  }
}

async function bwrapVersion(bwrapPath: string): Promise<string> {
  const out = await new Promise<string>((resolve, reject) => {
    execFile(bwrapPath, ['--version'], { timeout: PROBE_TIMEOUT_MS }, (err, stdout) => {
      if (err) reject(new BackendUnavailableError(`could not run ${bwrapPath} --version: ${err.message}`, { cause: err }));
      else resolve(stdout.trim());
    });
  });
  const m = /(\d+)\.(\d+)\.(\d+)/.exec(out);
  const v = m === null ? undefined : [Number(m[1]), Number(m[2]), Number(m[3])];
  const tooOld = v === undefined || v[0]! < MIN_VERSION[0] || (v[0] === MIN_VERSION[0] && (v[1]! < MIN_VERSION[1]));
  if (tooOld) {
    throw new BackendUnavailableError(
      `${bwrapPath} says "${out}"; berth needs bubblewrap ${MIN_VERSION.join('.')} or later (for --disable-userns): upgrade bubblewrap`,
    );
  }
  return m![0];
}

async function checkSandbox(host: BwrapHost, dirs: ReturnType<typeof sandboxDirs>, opts: ProbeOptions): Promise<void> {
  let sb;
  try {
    sb = await startSandbox({
      ...host,
      dirs,
      user: opts.user,
      network: 'none',
      seccomp: opts.seccomp,
      hostname: 'berth-probe',
      tmpSizeBytes: 1 << 20,
      maxProcesses: 64,
      startTimeoutMs: PROBE_TIMEOUT_MS,
    });
  } catch (err) {
    const said = err instanceof Error ? err.message : String(err);
    const fixes = diagnoseStartFailure(said, opts.facts ?? readHostFacts());
    throw new BackendUnavailableError(
      `bubblewrap cannot make a sandbox on this host as ${opts.user === undefined ? "berth's own uid" : `uid ${opts.user.uid}`} ` +
        `(${said})${fixes.length > 0 ? `: ${fixes.join('; ')}` : ''}`,
      { cause: err },
    );
  }
  try {
    const status = await readStatus(sb);
    const problems: string[] = [];
    if (!/^CapEff:\s*0+$/m.test(status)) problems.push('processes kept capabilities');
    if (!/^NoNewPrivs:\s*1$/m.test(status)) problems.push('no_new_privs is not set');
    if (opts.seccomp !== undefined && !/^Seccomp:\s*2$/m.test(status)) problems.push('the syscall filter is not in force');
    if (problems.length > 0) throw new BackendUnavailableError(`a bwrap sandbox started but ${problems.join(', ')}; berth will not run commands in it`);
  } catch (err) {
    if (isBerthError(err)) throw err;
    throw new BackendUnavailableError(`a bwrap sandbox started but could not run a process: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
  } finally {
    await sb.stop();
  }
}

async function readStatus(sb: Awaited<ReturnType<typeof startSandbox>>): Promise<string> {
  const p = await sb.spawn(['/bin/sh', '-c', 'cat /proc/self/status'], { env: { PATH: '/usr/bin:/bin' }, cwd: '/', stdin: false });
  let out = '';
  p.stdout.setEncoding('utf8').on('data', (d: string) => {
    if (out.length < 65536) out += d;
  });
  p.stderr.resume();
  const [code] = await Promise.all([p.exited, new Promise((r) => p.stdout.once('close', r))]);
  if (code !== 0) throw new Error(`cat /proc/self/status exited with ${code}`);
  return out;
}
