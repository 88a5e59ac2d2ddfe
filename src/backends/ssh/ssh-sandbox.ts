import { constants } from 'node:os';
import type { SandboxHandle, SandboxSpec, SpawnedProcess, SpawnOptions } from '../backend.js';
import type { RemoteAccount } from './accounts.js';
import { spawnAs, type RemoteExit, type SpawnContext } from './spawn.js';

/** Exit code as a shell reports it: the code, or 128 + the signal number; null when unknown (the connection was lost). */
export function exitCodeOf(exit: RemoteExit): number | null {
  if (exit.code !== null) return exit.code;
  if (exit.signal === null) return null;
  const n = (constants.signals as Record<string, number | undefined>)[exit.signal];
  return n === undefined ? null : 128 + n;
}

/**
 * `argv` as a backend's `spawn` starts it, as `account` on the host (in its workspace unless
 * `opts.cwd` says otherwise).
 */
export async function spawnIn(ctx: SpawnContext, account: RemoteAccount, argv: readonly string[], opts: SpawnOptions): Promise<SpawnedProcess> {
  const p = await spawnAs(ctx, account.name, argv, { env: opts.env, cwd: opts.cwd ?? account.workspace });
  // A process without piped stdin reads end-of-file at once, as on every backend.
  if (!opts.stdin) p.stdin.end();
  p.stdin.on('error', () => undefined);
  return {
    stdin: opts.stdin ? p.stdin : null,
    stdout: p.stdout,
    stderr: p.stderr,
    exited: p.exited.then(exitCodeOf),
    kill: () => p.kill(),
  };
}

/**
 * One SSH sandbox: an unprivileged account on the host, with its home (0700) holding the
 * workspace, its TMPDIR and berth's state dir. Every process starts as that account through
 * the launcher (spawn.ts): env, cwd and argv travel on the channel's stdin, never on an argv.
 */
export class SshSandboxHandle implements SandboxHandle {
  readonly name: string;
  readonly defaultCwd: string;
  readonly stateDir: string;
  readonly homeDir: string;
  /** Remote files have no host path here. */
  readonly hostDir = undefined;
  /*
   * Only the account's home: the host's /tmp is shared with every account on it (the sandbox's
   * TMPDIR is ~/tmp, inside the home).
   */
  readonly fileRoots: readonly string[];

  constructor(
    readonly spec: SandboxSpec,
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
  }

  spawn(argv: readonly string[], opts: SpawnOptions): Promise<SpawnedProcess> {
    return spawnIn(this.ctx, this.account, argv, opts);
  }

  hostPathOf(): undefined {
    return undefined;
  }
}
