import { randomBytes } from 'node:crypto';
import { PassThrough, type Readable, type Writable } from 'node:stream';
import type { ClientChannel } from 'ssh2';
import { BerthError, SandboxNotFoundError } from '../../errors.js';
import type { Logger } from '../../logging/logger.js';
import type { SpawnOptions } from '../backend.js';
import { isAccountName } from './account-name.js';
import { channelStatus } from './channel-status.js';
import type { SshConnectionPool } from './connections.js';
import type { SshConnection } from './connection.js';
import { endpointOf } from './errors.js';
import { encodeSpawnRequest, KILL_SCRIPT, LAUNCHER_SCRIPT, SPAWN_READY } from './launcher.js';
import { remoteRunner, scriptCommand } from './remote-exec.js';
import type { SshTarget } from './target.js';


/** How a remote process ended. `error` is set when no exit status came (connection lost). */
export interface RemoteExit {
  code: number | null;
  /** Signal name as Node spells it (`SIGKILL`, `SIGTERM`), when a signal ended it. */
  signal: string | null;
  error?: BerthError;
}

/** A process running as a sandbox account on the host, over one exec channel. */
export interface RemoteProcess extends AsyncDisposable {
  /**
   * Its pid in the sandbox's PID namespace (what `$$` says there; not the host's): also the
   * session id and process group of everything it starts.
   */
  readonly pid: number;
  readonly stdin: Writable;
  readonly stdout: Readable;
  readonly stderr: Readable;
  /**
   * Resolves when the process ended (its exit status arrived), or when the channel closed without
   * one; never rejects. Its output streams may stay open longer: a background process it started
   * may hold them.
   */
  readonly exited: Promise<RemoteExit>;
  /** Ends the process and everything it started (see KILL_SCRIPT), then the channel. Idempotent; never throws. */
  kill(): Promise<void>;
}

export interface SpawnContext {
  pool: SshConnectionPool;
  /** The backend's logger (`berth:ssh`); default silent. */
  log?: Logger | undefined;
  target: SshTarget;
  /** Root of sandbox homes on the host (accounts.ts `homeRoot`). */
  homeRoot: string;
  /** Most processes the sandbox's account may have at once (RLIMIT_NPROC, counted per uid); 0 or absent: no bound. */
  maxProcesses?: number | undefined;
  /** Size in MiB of each of the sandbox's private temp dirs, when its namespaces are made (default DEFAULT_TMP_SIZE_MB). */
  tmpSizeMb?: number | undefined;
}

/** Each private temp dir of a sandbox (/tmp, /var/tmp, /dev/shm) unless the settings say otherwise. */
export const DEFAULT_TMP_SIZE_MB = 256;

/** The ready line is short; a longer first line is not ours. */
const MAX_HEADER_BYTES = 4096;
const KILL_TIMEOUT_MS = 15_000;
/** After the kill helper: how long the channel may take to report the end. */
const EXIT_WAIT_MS = 5_000;

/**
 * Runs `argv` as the sandbox account `account` in `cwd` (an absolute host dir, entered as the
 * account) with `env` as its whole environment besides HOME, USER, LOGNAME, SHELL, PATH and
 * TMPDIR defaults, inside the sandbox's namespaces
 * (namespaces.ts; made by this call if they are not there), over one exec channel of the pool. The
 * environment, cwd and argv travel on the channel's stdin to a fixed launcher (launcher.ts), so
 * no value is on any argv on the host; the account, the home root and the bounds are, and they
 * are not secret.
 * Rejects (`SandboxNotFoundError` when the account is gone, else a `BerthError`) when the launcher
 * refused; after that the process's own failures are its exit status.
 *
 * @example
 * const p = await spawnAs(ctx, 'berth-0123456789abcdef01234567', ['bash', '--noprofile', '--norc'], { env: { TOKEN: t }, cwd: acct.workspace });
 * p.stdin.write('echo $TOKEN\n');
 * await p.kill();
 */
export async function spawnAs(ctx: SpawnContext, account: string, argv: readonly string[], opts: Pick<SpawnOptions, 'env'> & { cwd: string }): Promise<RemoteProcess> {
  if (!isAccountName(account)) throw new BerthError('spawn_failed', `"${account}" is not a sandbox account name`);
  const maxProcesses = ctx.maxProcesses ?? 0;
  if (!Number.isInteger(maxProcesses) || maxProcesses < 0 || maxProcesses > 9_999_999) {
    throw new BerthError('spawn_failed', `maxProcesses must be a whole number from 0 (no bound) to 9999999, got ${maxProcesses}`);
  }
  const tmpSizeMb = ctx.tmpSizeMb ?? DEFAULT_TMP_SIZE_MB;
  if (!Number.isInteger(tmpSizeMb) || tmpSizeMb < 1 || tmpSizeMb > 9_999_999) {
    throw new BerthError('spawn_failed', `tmpSizeMb must be a whole number of MiB from 1 to 9999999, got ${tmpSizeMb}`);
  }
  const tag = randomBytes(12).toString('base64url');
  const request = encodeSpawnRequest({ cwd: opts.cwd, tag, env: opts.env, argv });
  const launch = scriptCommand(LAUNCHER_SCRIPT, 'berth-launch', [account, ctx.homeRoot, String(maxProcesses), String(tmpSizeMb)]);
  const { channel, connection } = await ctx.pool.exec(ctx.target, launch);
  channel.on('error', (err: Error) => ctx.log?.debug(`${account}: channel: ${err.message}`));
  channel.write(request);
  const exited = exitOf(channel, connection);
  const stdout = new PassThrough();
  const stderr = new PassThrough();
  let pid: number;
  try {
    pid = await readyLine(channel, stdout, stderr, exited);
  } catch (err) {
    channel.close();
    throw refusal(err, account, endpointOf(ctx.target.host, ctx.target.port));
  }
  return new SpawnedProcess(ctx, account, tag, pid, channel, stdout, stderr, exited);
}

async function exitOf(channel: ClientChannel, connection: SshConnection): Promise<RemoteExit> {
  const { code, signal, error } = await channelStatus(channel, connection);
  return error === undefined ? { code, signal: signal ?? null } : { code: null, signal: null, error };
}

/** Copies `from` into `to` with backpressure (a reader that falls behind pauses the remote writer); ends `to` with it. */
function relay(from: Readable, to: PassThrough, onChunk?: (c: Buffer) => Buffer | undefined): void {
  from.on('data', (chunk: Buffer) => {
    const c = onChunk === undefined ? chunk : onChunk(chunk);
    if (c === undefined || c.length === 0) return;
    if (!to.write(c)) {
      from.pause();
      to.once('drain', () => from.resume());
    }
  });
  const end = (): void => {
    if (!to.writableEnded) to.end();
  };
  from.once('end', end);
  from.once('close', end);
}

/**
 * Wires the channel's output into `stdout` and `stderr` (owned streams: nothing is lost before
 * the caller reads) and reads the launcher's first stdout line: the pid, or its refusal. What
 * follows that line is the process's own output.
 */
function readyLine(channel: ClientChannel, stdout: PassThrough, stderr: PassThrough, exited: Promise<RemoteExit>): Promise<number> {
  return new Promise<number>((resolve, reject) => {
    let head: Buffer | undefined = Buffer.alloc(0);
    let settled = false;
    const early: Buffer[] = [];
    relay(channel.stderr, stderr, (c) => {
      if (!settled && early.length < 16) early.push(c);
      return c;
    });
    const fail = (why: string): void => {
      if (settled) return;
      settled = true;
      reject(new Error(why));
    };
    relay(channel, stdout, (chunk) => {
      if (head === undefined) return chunk;
      head = Buffer.concat([head, chunk]);
      const nl = head.indexOf(0x0a);
      if (nl < 0) {
        if (head.length > MAX_HEADER_BYTES) fail(`the launcher printed no ready line (${head.length} bytes without one)`);
        return undefined;
      }
      const line = head.subarray(0, nl).toString('utf8');
      const rest = head.subarray(nl + 1);
      head = undefined;
      const m = new RegExp(`^${SPAWN_READY} ([1-9][0-9]*)$`).exec(line);
      if (m === null) {
        fail(line.startsWith('E ') ? line.slice(2) : `unexpected launcher output: ${JSON.stringify(line.slice(0, 200))}`);
        return undefined;
      }
      settled = true;
      resolve(Number(m[1]));
      return rest;
    });
    void exited.then(async (x) => {
      if (settled) return;
      if (x.error !== undefined) {
        settled = true;
        reject(x.error);
        return;
      }
      // The exit status can overtake the last output (sshd reaps before it drains the pipes): the
      // launcher's refusal line may still be on its way.
      await outputEnd(channel, EXIT_WAIT_MS);
      const err = Buffer.concat(early).toString('utf8').trim().slice(0, 300);
      fail(`the launcher ended (${x.signal !== null ? `signal ${x.signal}` : `exit ${String(x.code)}`}) before the command started${err === '' ? '' : `: ${err}`}`);
    });
  });
}

/** Resolves when the channel's output ended (or closed), or after `ms`. */
function outputEnd(channel: ClientChannel, ms: number): Promise<void> {
  return new Promise<void>((resolve) => {
    if (channel.readableEnded || channel.destroyed) {
      resolve();
      return;
    }
    const timer = setTimeout(resolve, ms);
    const done = (): void => {
      clearTimeout(timer);
      resolve();
    };
    channel.once('end', done);
    channel.once('close', done);
  });
}

function refusal(err: unknown, account: string, endpoint: string): BerthError {
  if (err instanceof BerthError) return err;
  const why = err instanceof Error ? err.message : String(err);
  if (/^no account /.test(why)) return new SandboxNotFoundError(`sandbox account ${account} is gone from SSH host ${endpoint}: ${why}`);
  return new BerthError('spawn_failed', `cannot start a process as ${account} on SSH host ${endpoint}: ${why}`);
}

class SpawnedProcess implements RemoteProcess {
  private killing: Promise<void> | undefined;

  constructor(
    private readonly ctx: SpawnContext,
    private readonly account: string,
    private readonly tag: string,
    readonly pid: number,
    private readonly channel: ClientChannel,
    readonly stdout: Readable,
    readonly stderr: Readable,
    readonly exited: Promise<RemoteExit>,
  ) {}

  get stdin(): Writable {
    return this.channel;
  }

  kill(): Promise<void> {
    this.killing ??= this.doKill();
    return this.killing;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.kill();
  }

  /**
   * Closing the channel alone ends nothing on the host (sshd leaves the processes running), so
   * the tree is ended by a root helper first, over the pool (a new connection if this one died).
   */
  private async doKill(): Promise<void> {
    try {
      const r = await remoteRunner(this.ctx.pool, this.ctx.target)(KILL_SCRIPT, [this.account, String(this.pid), this.tag], { timeoutMs: KILL_TIMEOUT_MS });
      this.ctx.log?.debug(`${this.account}: killed ${r.stdout.trim()} process(es) of spawn ${this.pid}`);
    } catch (err) {
      this.ctx.log?.debug(`${this.account}: could not kill spawn ${this.pid}: ${String(err)}`);
    }
    this.channel.close();
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([this.exited, new Promise<void>((resolve) => (timer = setTimeout(resolve, EXIT_WAIT_MS)))]);
    clearTimeout(timer);
  }
}
