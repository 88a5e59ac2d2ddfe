import path from 'node:path';
import { BerthError, ConfigError } from '../../errors.js';
import { isAccountName } from './account-name.js';
import { ENSURE_SCRIPT, LIST_SCRIPT, PROBE_SCRIPT, REMOVE_SCRIPT, STOP_SCRIPT } from './account-scripts.js';
import { RemoteHostError } from './errors.js';
import type { RemoteResult, RemoteRunner } from './remote-exec.js';

/*
 * One unprivileged account per sandbox on the SSH host.
 *
 * The model: berth logs in as root (uid 0) and nothing else. Root creates and removes the
 * accounts (useradd/userdel), each with a uid no account had before it (uid-range.ts), and starts
 * each command as the sandbox's account with setpriv, inside the sandbox's own PID, IPC and mount
 * namespaces (launcher.ts, namespaces.ts). A login user with passwordless sudo is refused at
 * check time rather than half supported: sudo would put every helper's argv into the host's auth
 * log and depend on a sudoers policy berth cannot see. A host without root, the tools (useradd,
 * util-linux >= 2.32 for setpriv --no-new-privs, unshare, nsenter and flock), a kernel that lets
 * root make those namespaces, or bash >= 4.4 is refused at check time with what to install; there
 * is no weaker mode (no shared account, no shared namespaces, no fallback).
 *
 * What one sandbox account can NOT do to another on the same host: read or write its home
 * (0700, owned by it, under a 0711 root-owned root), see its processes or their command lines
 * (each sandbox has its own PID namespace and /proc), read its processes' environment, signal
 * them, reach its /tmp, /var/tmp, /dev/shm or /run/lock (a tmpfs of each sandbox's own) or its
 * SysV IPC objects and POSIX message queues (an IPC namespace of its own), inherit anything of a
 * removed sandbox (uids are never reused), read /etc/shadow, or gain privileges through setuid
 * programs (no_new_privs). What it still shares: the host's kernel, its network, and the files
 * any account may read there.
 */

export const DEFAULT_HOME_ROOT = '/home/berth';

/** Account helpers of one process running at once on one host (see `RemoteAccounts.bounded`). */
const MAX_CONCURRENT_HELPERS = 4;

/** What `check` learned about the host. */
export interface HostProbe {
  uid: number;
  bash: [number, number];
  /** Tools (or features) the host lacks. */
  missing: string[];
}

/** One sandbox account as it exists on the host. */
export interface RemoteAccount {
  name: string;
  uid: number;
  gid: number;
  home: string;
  /** The sandbox's default working directory. */
  workspace: string;
  /** Its TMPDIR. */
  tmp: string;
  /** berth's own files in the sandbox (shell snapshots). */
  stateDir: string;
  /** This `ensure` created the account (it did not exist). */
  created: boolean;
}

/** An account of this installation as `list` found it. */
export interface AccountRecord {
  name: string;
  digest: string;
  ephemeral: boolean;
  /** The account exists (false: only its record is left). */
  exists: boolean;
  /** Processes it runs now. */
  processes: number;
  /** Not stopped: false once stopped or hibernated, until a spawn makes its namespaces again. */
  up: boolean;
  /** Its home on the host; undefined when the account is gone. */
  home: string | undefined;
}

export function parseProbe(text: string): HostProbe {
  const probe: HostProbe = { uid: -1, bash: [0, 0], missing: [] };
  for (const line of text.split('\n')) {
    const [key, value = ''] = line.trim().split(/\s+/, 2);
    if (key === 'uid') probe.uid = Number(value);
    else if (key === 'bash') probe.bash = value.split('.').map(Number).slice(0, 2) as [number, number];
    else if (key === 'missing') probe.missing.push(value);
  }
  return probe;
}

const PACKAGES: Readonly<Record<string, string>> = {
  useradd: 'passwd (Debian/Ubuntu) or shadow-utils (RHEL)',
  userdel: 'passwd (Debian/Ubuntu) or shadow-utils (RHEL)',
  groupadd: 'passwd (Debian/Ubuntu) or shadow-utils (RHEL)',
  getent: 'libc-bin (Debian/Ubuntu) or glibc-common (RHEL)',
  setpriv: 'util-linux (>= 2.32)',
  'setpriv-nnp': 'util-linux >= 2.32 (its setpriv lacks --no-new-privs)',
  unshare: 'util-linux',
  'unshare-kill-child': 'a newer util-linux (its unshare lacks --kill-child)',
  nsenter: 'util-linux',
  'nsenter-no-fork': 'a newer util-linux (its nsenter lacks --no-fork)',
  setsid: 'util-linux',
  flock: 'util-linux',
  ipcrm: 'util-linux',
  mount: 'mount (Debian/Ubuntu) or util-linux (RHEL)',
  mkfifo: 'coreutils',
  find: 'findutils',
  tar: 'tar (GNU tar: files go in and out of a sandbox through it)',
  proc: 'a mounted /proc',
  cgroups: 'cgroup v2 with cgroup.kill and cgroup.freeze (Linux >= 5.14; a cgroup2 mount root may write to): berth puts each command in a ' +
    'cgroup of its own so a timeout ends whatever it started',
  namespaces: 'a kernel that lets root make the PID, IPC and mount namespaces each sandbox runs in, with a /proc and tmpfs mounted inside ' +
    '(unshare --pid --fork --ipc --mount failed there; a host that is itself a container needs CAP_SYS_ADMIN and a seccomp and AppArmor profile that allow unshare and mount)',
};

/** Why the host cannot run sandboxes, or undefined when it can. Pure. */
export function probeProblem(probe: HostProbe, where: { endpoint: string; user: string }): RemoteHostError | undefined {
  if (probe.uid !== 0) {
    return new RemoteHostError(
      `SSH host ${where.endpoint}: the ssh backend logs in as root, but "${where.user}" is uid ${probe.uid < 0 ? 'unknown' : probe.uid} there. ` +
        'berth needs root to create one unprivileged account per sandbox (useradd) and run each command as it (setpriv); ' +
        'set ssh.user to root with a key only berth uses (sshd: PermitRootLogin prohibit-password). Passwordless sudo is not supported',
    );
  }
  const [major, minor] = probe.bash;
  if (major < 4 || (major === 4 && minor < 4)) {
    return new RemoteHostError(`SSH host ${where.endpoint} has bash ${major}.${minor}; berth's shell and launcher need bash >= 4.4 there`);
  }
  if (probe.missing.length > 0) {
    const what = probe.missing.map((m) => `${m} (${PACKAGES[m] ?? m})`).join(', ');
    return new RemoteHostError(`SSH host ${where.endpoint} lacks ${what}; install them there. berth never runs sandboxes on it in a weaker mode`);
  }
  return undefined;
}

/** The result line starting with `word`, or the error the helper reported. */
function resultLine(r: RemoteResult, word: string, doing: string, endpoint: string): string[] {
  const lines = r.stdout.split('\n');
  const refusal = lines.find((l) => l.startsWith('E '));
  if (refusal !== undefined) throw new BerthError('sandbox_start_failed', `cannot ${doing} on SSH host ${endpoint}: ${refusal.slice(2)}`);
  const line = lines.find((l) => l.startsWith(`${word} `));
  if (line === undefined || r.code !== 0) {
    throw new BerthError(
      'sandbox_start_failed',
      `cannot ${doing} on SSH host ${endpoint}: the helper ended with ${r.signal !== undefined ? `signal ${r.signal}` : `exit ${String(r.code)}`}: ${r.stderr.trim().slice(0, 300) || '(no output)'}`,
    );
  }
  return line.split(' ').slice(1);
}

function checkHomeRoot(root: string): string {
  if (!root.startsWith('/') || root === '/' || path.posix.normalize(root) !== root || root.endsWith('/') || !/^[A-Za-z0-9._/-]+$/.test(root)) {
    throw new ConfigError(`ssh home root "${root}" must be a normalized absolute path other than / (letters, digits, . _ - and /), e.g. ${DEFAULT_HOME_ROOT}`);
  }
  return root;
}

export interface RemoteAccountsOptions {
  /** `host:port`, for messages. */
  endpoint: string;
  /** The login user, for messages. */
  user: string;
  /** Where sandbox homes live on the host (default /home/berth). */
  homeRoot?: string;
}

/**
 * The sandbox accounts of one host. Creating and removing are bounded within this process (a
 * few at once: useradd locks /etc/passwd; the helpers retry a lock another holds).
 *
 * @example
 * const accounts = new RemoteAccounts(remoteRunner(pool, target), { endpoint: 'build1:22', user: 'root' });
 * await accounts.check();
 * const acct = await accounts.ensure({ name: accountName(spec.digest), installation, digest: spec.digest, ephemeral: true });
 */
export class RemoteAccounts {
  readonly homeRoot: string;
  /** Helpers running now, and those waiting for a turn. */
  private running = 0;
  private readonly waiting: Array<() => void> = [];

  constructor(
    private readonly run: RemoteRunner,
    private readonly opts: RemoteAccountsOptions,
  ) {
    this.homeRoot = checkHomeRoot(opts.homeRoot ?? DEFAULT_HOME_ROOT);
  }

  /** Whether the host can run sandboxes (root login, tools): a `RemoteHostError` saying what to fix if not. */
  async check(): Promise<HostProbe> {
    const r = await this.run(PROBE_SCRIPT, []);
    const probe = parseProbe(r.stdout);
    const problem = probeProblem(probe, this.opts);
    if (problem !== undefined) throw problem;
    return probe;
  }

  /**
   * Creates the account (or adopts this installation's existing one) with its home, workspace and
   * tmp dirs. `fresh`: an existing one is deleted first (processes, files), never adopted.
   */
  ensure(input: { name: string; installation: string; digest: string; ephemeral: boolean; fresh?: boolean }): Promise<RemoteAccount> {
    this.assertName(input.name);
    if (!/^[A-Za-z0-9._-]+$/.test(input.installation) || !/^[0-9a-f]+$/.test(input.digest)) {
      throw new BerthError('sandbox_start_failed', `installation "${input.installation}" or digest "${input.digest}" has characters berth never writes`);
    }
    return this.bounded(async () => {
      const r = await this.run(ENSURE_SCRIPT, [input.name, this.homeRoot, input.installation, input.digest, input.ephemeral ? '1' : '0', input.fresh === true ? '1' : '0'], { timeoutMs: 120_000 });
      const [name, uid, gid, home, made] = resultLine(r, 'account', `create sandbox account ${input.name}`, this.opts.endpoint);
      const h = home as string;
      return {
        name: name as string, uid: Number(uid), gid: Number(gid), home: h, workspace: `${h}/workspace`, tmp: `${h}/tmp`, stateDir: `${h}/.berth`,
        created: made === '1',
      };
    });
  }

  /**
   * Ends every process of the account and removes it with its files. Gone already is success.
   * With `installation`, an account recorded as another installation's is refused, untouched.
   */
  remove(name: string, installation?: string): Promise<{ killed: number }> {
    this.assertName(name);
    return this.bounded(async () => {
      const r = await this.run(REMOVE_SCRIPT, [name, this.homeRoot, ...(installation === undefined ? [] : [installation])], { timeoutMs: 120_000 });
      const [, killed] = resultLine(r, 'removed', `remove sandbox account ${name}`, this.opts.endpoint);
      return { killed: Number(killed) };
    });
  }

  /** Ends every process of the account and keeps the account and its files (an idle persistent sandbox); `installation` as for `remove`. */
  stop(name: string, installation?: string): Promise<{ killed: number }> {
    this.assertName(name);
    return this.bounded(async () => {
      const r = await this.run(STOP_SCRIPT, [name, ...(installation === undefined ? [] : [installation])], { timeoutMs: 120_000 });
      const [, killed] = resultLine(r, 'stopped', `stop sandbox account ${name}`, this.opts.endpoint);
      return { killed: Number(killed) };
    });
  }

  /** This installation's accounts on the host, from their records (for reapers). */
  async list(installation: string): Promise<AccountRecord[]> {
    const r = await this.run(LIST_SCRIPT, [installation]);
    if (r.code !== 0) resultLine(r, 'sandbox', 'list sandbox accounts', this.opts.endpoint);
    return r.stdout
      .split('\n')
      .filter((l) => l.startsWith('sandbox '))
      .map((l) => {
        const [, name, digest, ephemeral, exists, processes, up, home] = l.split(' ');
        return {
          name: name as string, digest: digest === '-' ? '' : (digest as string), ephemeral: ephemeral === '1', exists: exists === '1', processes: Number(processes),
          up: up === '1',
          home: home === undefined || home === '-' ? undefined : home,
        };
      });
  }

  private assertName(name: string): void {
    if (!isAccountName(name)) throw new BerthError('sandbox_start_failed', `"${name}" is not a sandbox account name (accountName() makes them)`);
  }

  /**
   * At most MAX_CONCURRENT_HELPERS of this process's create/remove/stop helpers run at once on the
   * host: they take /etc/passwd's lock (the helpers retry a held lock for a while) and scan /proc,
   * so a burst of new sessions must not pile up on the lock, and one slow removal must not hold
   * every new session back either.
   */
  private async bounded<T>(fn: () => Promise<T>): Promise<T> {
    if (this.running >= MAX_CONCURRENT_HELPERS) await new Promise<void>((resolve) => this.waiting.push(resolve));
    this.running += 1;
    try {
      return await fn();
    } finally {
      this.running -= 1;
      this.waiting.shift()?.();
    }
  }

}
