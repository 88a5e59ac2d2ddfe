import { constants } from 'node:os';
import type { SandboxHandle, SandboxSpec, SpawnOptions } from '../backend.js';
import type { ProcessGroups, SpawnedProcess } from '../../shell/transport.js';
import type { RemoteAccount } from './accounts.js';
import { SHELL_TAG_VAR } from '../../shell/protocol.js';
import { SHELL_ARGV } from '../plumbing/open-shell.js';
import { inSandboxNamespaces, PRIVATE_DIRS } from './namespaces.js';
import { remoteRunner } from './remote-exec.js';
import { SshProcessGroups } from './remote-groups.js';
import { spawnAs, type RemoteExit, type SpawnContext } from './spawn.js';
import type { SshSettings } from './settings.js';

/** How long a new shell waits for the shells a lost connection cut off to save their state and end. */
const LOST_SHELL_GRACE_SECONDS = 5;

/**
 * Root helper: waits until none of the pids is a live process of the account (at most
 * LOST_SHELL_GRACE_SECONDS). Arguments: account, pids (the sandbox's, so it runs in its
 * namespaces). Prints how many are left.
 */
const WAIT_GONE_SCRIPT = inSandboxNamespaces(`
set -u
n=$1; shift
u=
while IFS=: read -r a _ uu _; do [[ $a == "$n" ]] && { u=$uu; break; }; done < /etc/passwd
[[ -n $u ]] || { echo 0; exit 0; }
for ((i = 0; i < ${LOST_SHELL_GRACE_SECONDS * 20}; i++)); do
  left=0
  for p in "$@"; do
    ru=
    { while read -r k v _; do [[ $k == Uid: ]] && { ru=$v; break; }; done < "/proc/$p/status"; } 2>/dev/null
    [[ $ru == "$u" ]] && left=$((left + 1))
  done
  (( left )) || break
  sleep 0.05
done
echo "$left"
`, 'echo 0');

/** Exit code as a shell reports it: the code, or 128 + the signal number; null when unknown (the connection was lost). */
export function exitCodeOf(exit: RemoteExit): number | null {
  if (exit.code !== null) return exit.code;
  if (exit.signal === null) return null;
  const n = (constants.signals as Record<string, number | undefined>)[exit.signal];
  return n === undefined ? null : 128 + n;
}

/** A persistent shell (not the warden, not a helper): the shell layer tags each with SHELL_TAG_VAR. */
function isPersistentShell(argv: readonly string[], opts: SpawnOptions): boolean {
  return argv.length === SHELL_ARGV.length && argv.every((a, i) => a === SHELL_ARGV[i]) && Object.hasOwn(opts.env, SHELL_TAG_VAR);
}

/**
 * `argv` as a backend's `spawn` starts it, as `account` on the host (in its workspace unless
 * `opts.cwd` says otherwise). `onLost` hears of one whose connection was lost while it ran.
 */
export async function spawnIn(
  ctx: SpawnContext, account: RemoteAccount, argv: readonly string[], opts: SpawnOptions, onLost?: (pid: number) => void,
): Promise<SpawnedProcess> {
  const p = await spawnAs(ctx, account.name, argv, { env: opts.env, cwd: opts.cwd ?? account.workspace });
  if (onLost !== undefined) void p.exited.then((x) => x.error !== undefined && onLost(p.pid));
  // A process without piped stdin reads end-of-file at once, as on every backend.
  if (!opts.stdin) p.stdin.end();
  p.stdin.on('error', () => undefined);
  return {
    stdin: opts.stdin ? p.stdin : null,
    stdout: p.stdout,
    stderr: p.stderr,
    exited: p.exited.then(exitCodeOf),
    kill: () => p.kill(),
    // The launcher reports it (stage 2's own pid, before the command runs): the sandbox's pid; the host's is not known here.
    pids: async () => ({ host: undefined, sandbox: p.pid }),
  };
}

/**
 * One SSH sandbox: an unprivileged account on the host, with its home (0700) holding the
 * workspace, its TMPDIR and berth's state dir, and its own PID, IPC and mount namespaces
 * (namespaces.ts) with private temp dirs, and its cgroups (cgroup-scripts.ts): a command's processes
 * end with its group at a timeout whatever they do. Every process starts as that account inside them
 * through the launcher (spawn.ts): env, cwd and argv travel on the channel's stdin, never on an argv.
 */
export class SshSandboxHandle implements SandboxHandle {
  readonly name: string;
  readonly defaultCwd: string;
  readonly stateDir: string;
  readonly homeDir: string;
  /** Remote files have no host path here. */
  readonly hostDir = undefined;
  /** Only the account's home, which holds the workspace, its TMPDIR (~/tmp) and berth's state. */
  readonly fileRoots: readonly string[];
  /** tmpfs of the sandbox's namespaces: emptied when they are made again. */
  readonly volatileDirs = PRIVATE_DIRS;
  /** Its command groups: cgroups on the host, managed by a root agent there (remote-groups.ts). */
  readonly processGroups: ProcessGroups;

  constructor(
    readonly spec: SandboxSpec<SshSettings>,
    readonly ref: string,
    private readonly account: RemoteAccount,
    private readonly ctx: SpawnContext,
    readonly recreated: boolean,
  ) {
    this.name = account.name;
    this.defaultCwd = account.workspace;
    this.stateDir = account.stateDir;
    this.homeDir = account.home;
    this.fileRoots = [account.home];
    this.processGroups = new SshProcessGroups({ pool: ctx.pool, target: ctx.target, account: account.name, log: ctx.log });
  }

  /** Host pids of processes whose connection was lost while they ran (they may still run there). */
  private readonly cutOff = new Set<number>();

  async spawn(argv: readonly string[], opts: SpawnOptions): Promise<SpawnedProcess> {
    if (this.cutOff.size > 0 && isPersistentShell(argv, opts)) await this.settleCutOff();
    return spawnIn(this.ctx, this.account, argv, opts, (pid) => this.cutOff.add(pid));
  }

  /**
   * A shell cut off from berth by a lost connection still runs on the host; once its command is
   * swept it reads end-of-file and saves its state (the snapshot) as it exits. A new shell waits
   * for that (bounded), so it restores the old shell's env instead of starting before it was saved.
   */
  private async settleCutOff(): Promise<void> {
    const pids = [...this.cutOff];
    this.cutOff.clear();
    await remoteRunner(this.ctx.pool, this.ctx.target)(WAIT_GONE_SCRIPT, [this.account.name, ...pids.map(String)], {
      timeoutMs: (LOST_SHELL_GRACE_SECONDS + 10) * 1000,
    }).catch(() => undefined);
  }

  hostPathOf(): undefined {
    return undefined;
  }
}
